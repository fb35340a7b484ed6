"""Using a trained verifier on text: split a text into check-worthy claims with their offsets."""
