"""The agent-loop scheduler: trajectories advance on their own, tools are batched, loops nest."""

from types import SimpleNamespace

import pytest

from factrl.agents.loop import CallTool, Generate, run_loops
from factrl.llm.base import Completion, SamplingParams, TokensUnsupported


class StepEngine:
    """A step-level fake: a request for ``max_tokens`` tokens finishes after that many steps.
    ``steps`` records which requests (their first prompt id) decoded together at each step."""

    def __init__(self):
        self.running, self.steps, self.released = [], [], 0

    def release(self):
        self.released += 1

    def submit(self, ids, params, seed=None):
        r = SimpleNamespace(tag=ids[0], left=params.max_tokens, done=False, completion=None)
        self.running.append(r)
        return r

    def step(self):
        self.steps.append(sorted(r.tag for r in self.running))
        for r in self.running:
            r.left -= 1
            if r.left == 0:
                r.done, r.completion = True, Completion(text=f"out{r.tag}", token_ids=[r.tag])
        done = [r for r in self.running if r.done]
        self.running = [r for r in self.running if not r.done]
        return done


class BatchTool:
    name = "echo"

    def __init__(self):
        self.batches = []

    def __call__(self, queries):
        self.batches.append(list(queries))
        return [f"answer to {q}" for q in queries]


def _generate(llm, tag, tokens):
    return Generate(llm, SamplingParams(max_tokens=tokens), prompt_ids=[tag])


def test_a_trajectory_rejoins_while_others_decode():
    engine, tool = StepEngine(), BatchTool()

    def short(tag):  # 2 tokens, a tool call, 2 more tokens
        first = yield _generate(engine, tag, 2)
        answer = yield CallTool(tool, first.text)
        second = yield _generate(engine, tag + 10, 2)
        return [first.text, answer, second.text]

    def long():
        done = yield _generate(engine, 3, 6)
        return done.text

    out = run_loops([short(1), short(2), long()])
    assert out == [["out1", "answer to out1", "out11"], ["out2", "answer to out2", "out12"], "out3"]
    assert tool.batches == [["out1", "out2"]]  # both paused trajectories in one tool call
    # the short trajectories' second turns decode next to the long one: 6 steps, not 2 + 6 phases
    assert engine.steps == [[1, 2, 3], [1, 2, 3], [3, 11, 12], [3, 11, 12], [3], [3]]
    assert engine.released == 1  # told once that the burst is over (frees the local engine's KV slots)


def test_nested_loops_and_batch_backends():
    calls = []

    class ChatOnly:
        def complete_tokens(self, prompts, params):
            raise TokensUnsupported("chat only")

        def chat(self, conversations, params):
            calls.append(len(conversations))
            return [[Completion(text=c[-1]["content"].upper())] for c in conversations]

    llm = ChatOnly()

    def child(q):
        c = yield Generate(llm, SamplingParams(), conversation=[{"role": "user", "content": q}])
        return c.text

    def parent(q):
        try:
            yield Generate(llm, SamplingParams(), prompt_ids=[1])
        except TokensUnsupported:
            pass  # the backend told the loop to use chat
        inner = yield from child(q)
        return f"{q}->{inner}"

    assert run_loops([parent("a"), parent("b")]) == ["a->A", "b->B"]
    assert calls == [2]  # the chat requests pending at one step went out as one batched call


def test_bad_actions_and_tool_answers_fail_clearly():
    def bad():
        yield "not an action"

    with pytest.raises(TypeError, match="expected Generate or CallTool"):
        run_loops([bad()])

    def asks():
        yield CallTool(lambda queries: [], "q")

    with pytest.raises(RuntimeError, match="0 answers for 1 queries"):
        run_loops([asks()])
