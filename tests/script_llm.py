"""A scripted token-level LLM for tests: SmolLM2 token ids of a reply chosen by the prompt."""

from __future__ import annotations

from factrl.llm.base import Completion, TokensUnsupported
from factrl.llm.tokens import encode_chat, trim_at_stop


class ScriptLLM:
    """A token-level fake that 'generates' ``reply(decoded_prompt)`` exactly as the local engine
    would: SmolLM2 token ids, cut at the first token whose decoding contains a stop string."""

    model_name = "script"

    def __init__(self, tokenizer, reply, chat_only: bool = False):
        self.tokenizer = tokenizer
        self.reply = reply
        self.chat_only = chat_only
        self.calls = []  # batch sizes of complete_tokens / chat calls

    def encode_chat(self, messages):
        return encode_chat(self.tokenizer, messages)

    def _complete(self, prompt_text: str, params) -> Completion:
        ids = self.tokenizer(self.reply(prompt_text), add_special_tokens=False)["input_ids"]
        for j in range(1, len(ids) + 1):
            if j > params.max_tokens:
                break
            text, stopped = trim_at_stop(self.tokenizer.decode(ids[:j]), params.stop, params.include_stop)
            if stopped:
                return Completion(text, ids[:j], "stop")
        if len(ids) < params.max_tokens:  # the reply ends: the engine returns the EOS it sampled
            return Completion(self.tokenizer.decode(ids), ids + [self.tokenizer.eos_token_id], "stop")
        kept = ids[: params.max_tokens]
        return Completion(self.tokenizer.decode(kept), kept, "length" if len(ids) > params.max_tokens else "stop")

    def complete_tokens(self, prompts, params):
        if self.chat_only:
            raise TokensUnsupported("chat only")
        self.calls.append(len(prompts))
        return [[self._complete(self.tokenizer.decode(p), params)] for p in prompts]

    def chat(self, conversations, params):
        self.calls.append(len(conversations))
        out = []
        for conv in conversations:
            c = self._complete("\n".join(m["content"] for m in conv), params)
            if c.finish_reason == "stop":  # an OpenAI-style API drops the matched stop string
                for s in params.stop:
                    if c.text.endswith(s):
                        c = Completion(c.text[: -len(s)], None, "stop")
            out.append([c])
        return out
