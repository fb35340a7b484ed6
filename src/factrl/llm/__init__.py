"""LLMs behind one protocol (base): the in-process engine (local), OpenAI-compatible HTTP
(openai_compat), the servers factrl starts (serve, vllm), the on-disk cache and model loading."""
