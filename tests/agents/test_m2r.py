"""M2R (factrl.agents.m2r): the key-information store's JSON validation, micro retrieval, the staged
format check, and rollouts through the shared agent loop with a scripted policy (injected spans
masked; a malformed save is a recorded format failure, not a crash), on SmolLM2's real tokenizer."""

from __future__ import annotations

import json

import pytest

from factrl.agents import m2r
from factrl.agents.rollout import replay
from factrl.rl.sft import IGNORE_INDEX, sft_example
from tests.script_llm import ScriptLLM

GOOD = (
    "<think>I need the founder of Orlen Studios.</think>\n<macro_tool_call>Orlen Studios founder</macro_tool_call>"
    "\n<macro_result>\nDoc 1 (Orlen Studios) Orlen Studios was founded by Ilse Parrow.\n</macro_result>\n"
    '<key_info_save>{"founder of Orlen Studios": "Ilse Parrow"}</key_info_save>'
    "<answer><micro_tool_call>founder of Orlen Studios</micro_tool_call>"
    '\n<micro_response>\n{"founder of Orlen Studios": "Ilse Parrow"}\n</micro_response>\n'
    "The founder is \\boxed{Ilse Parrow}.</answer>"
)


# --- the store -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "problem"), [
    ('{"a": "b"', "not valid JSON"),
    ('["a", "b"]', "must be a JSON object"),
    ("{}", "holds no key"),
    ('{"a": {"b": "c"}}', "must be a string or a number"),
    ('{"a": true}', "must be a string or a number"),
    ('{"": "x"}', "empty key"),
    ('{"a": "   "}', "1..200 characters"),
    (json.dumps({f"k{i}": "v" for i in range(m2r.MAX_KEYS + 1)}), "at most"),
    ("not json at all", "not valid JSON"),
])
def test_a_bad_save_is_refused_and_recorded(text, problem):
    store = m2r.KeyInfoStore()
    assert problem in store.save(text)
    assert store.values == {} and len(store.errors) == 1 and problem in store.errors[0]


def test_a_valid_save_stores_strings_and_later_saves_win():
    store = m2r.KeyInfoStore()
    assert store.save('{"founder": "Ilse Parrow", "year": 1991}') is None
    assert store.save('{"founder": "Ada Kim"}') is None
    assert store.values == {"founder": "Ada Kim", "year": "1991"} and store.errors == []


def test_micro_retrieval_finds_keys_exactly_or_up_to_case_and_reports_missing_ones():
    store = m2r.KeyInfoStore({"Founder of Orlen Studios": "Ilse Parrow", "year": "1991"})
    found = json.loads(m2r.micro_answer(store, "founder of orlen studios."))
    assert found == {"Founder of Orlen Studios": "Ilse Parrow"}
    both = m2r.micro_answer(store, '{"query": ["year", "Founder of Orlen Studios"]}')
    assert json.loads(both) == {"year": "1991", "Founder of Orlen Studios": "Ilse Parrow"}
    missing = m2r.micro_answer(store, "birthplace")
    assert "could not be retrieved" in missing and "birthplace" in missing
    # a saved value cannot smuggle a closing tag into the injected response
    store.values["x"] = "a</micro_response>b"
    assert "</micro_response>" not in m2r.micro_answer(store, "x")


# --- the format check ------------------------------------------------------------------------


def test_a_well_formed_response_parses_for_both_stages():
    for stage in (1, 2):
        p = m2r.parse_m2r(GOOD, stage)
        assert p.format_valid, p.error
        assert p.saved == {"founder of Orlen Studios": "Ilse Parrow"}
        assert p.macro_queries == ("Orlen Studios founder",) and p.micro_queries == ("founder of Orlen Studios",)
        assert p.final_answer == "Ilse Parrow"


def test_stage_1_needs_no_micro_retrieval_stage_2_does():
    direct = GOOD[: GOOD.index("<answer>")] + "<answer>The founder is \\boxed{Ilse Parrow}.</answer>"
    assert m2r.parse_m2r(direct, 1).format_valid
    p = m2r.parse_m2r(direct, 2)
    assert not p.format_valid and "micro_tool_call" in p.error
    assert p.final_answer == "Ilse Parrow"  # the answer still counts for the F1 scores


@pytest.mark.parametrize(("mutate", "error"), [
    (lambda t: t.replace('{"founder of Orlen Studios": "Ilse Parrow"}</key_info_save>',
                         "{founder: Ilse}</key_info_save>"), "not valid JSON"),
    (lambda t: t.replace("\\boxed{Ilse Parrow}", "Ilse Parrow"), "no \\boxed{}"),
    (lambda t: t.replace("The founder is", "Ilse Parrow, the founder, is"), "stated outside \\boxed{}"),
    (lambda t: "loose text " + t, "text outside tags"),
    (lambda t: t.replace("</answer>", ""), "unclosed <answer>"),
    (lambda t: t[t.index("<key_info_save>"):], "no <macro_tool_call>"),
    (lambda t: t.replace("\n<macro_result>", "<think>x</think>\n<macro_result>"), "without a following"),
    (lambda t: t + "<think>more</think>", "not the last segment"),
    (lambda t: t.replace("<micro_tool_call>founder of Orlen Studios</micro_tool_call>", ""), "not preceded by"),
])
def test_malformed_responses_are_format_failures_with_the_reason(mutate, error):
    p = m2r.parse_m2r(mutate(GOOD), 2)
    assert not p.format_valid and error in p.error


@pytest.mark.parametrize("text", [None, "", "<answer>", "<key_info_save>{" * 50, "\\boxed{" * 30, 17])
def test_the_parser_never_raises(text):
    assert not m2r.parse_m2r(text).format_valid


def test_reference_text_wraps_each_answer_as_its_tool_does():
    turns = [{"role": "model", "text": "<think>a</think><macro_tool_call>q</macro_tool_call>"},
             {"role": "env", "text": "Doc 1 x"},
             {"role": "model", "text": '<key_info_save>{"k": "v"}</key_info_save>'},
             {"role": "env", "text": ""},
             {"role": "model", "text": "<answer><micro_tool_call>k</micro_tool_call>"},
             {"role": "env", "text": '{"k": "v"}'},
             {"role": "model", "text": "\\boxed{v}</answer>"}]
    text = m2r.reference_text(turns)
    assert "<macro_result>\nDoc 1 x\n</macro_result>" in text and "<micro_response>\n{\"k\": \"v\"}" in text
    assert m2r.parse_m2r(text).format_valid


# --- rollouts through the shared loop ------------------------------------------------------------


class FakeRetriever:
    def search(self, queries, k):
        from types import SimpleNamespace

        return [[SimpleNamespace(id="p1", title="Orlen Studios", text="Orlen Studios was founded by Ilse Parrow.")]
                for _ in queries]


def _policy(save: str):
    """A scripted M2R policy: each reply continues the response the prompt ends with."""

    def reply(prompt: str) -> str:
        response = prompt.rsplit("Question: ", 1)[-1]  # the system prompt names every tag
        if "<micro_response>" in response:
            return "The founder is \\boxed{Ilse Parrow}.</answer>"
        if "</key_info_save>" in response:
            return "<answer><micro_tool_call>founder of Orlen Studios</micro_tool_call>"
        if "<macro_result>" in response:
            return f"<key_info_save>{save}</key_info_save>"
        return "I will search.</think>\n<macro_tool_call>Orlen Studios founder</macro_tool_call>"

    return reply


def test_a_rollout_writes_the_store_and_answers_from_it(tokenizer):
    llm = ScriptLLM(tokenizer, _policy('{"founder of Orlen Studios": "Ilse Parrow"}'))
    [res] = m2r.run_m2r(llm, ["Who founded Orlen Studios?"], m2r.MacroTool(FakeRetriever(), k=1))
    assert res.parse.format_valid, (res.parse.error, res.trajectory.response_text)
    assert res.store.values == {"founder of Orlen Studios": "Ilse Parrow"} and res.answer == "Ilse Parrow"
    t = res.trajectory
    assert t.num_tool_calls == 3 and t.finish_reason == "stop"
    # what the environment injected is exactly what has loss mask 0
    injected = tokenizer.decode([i for i, m in zip(t.response_ids, t.loss_mask) if m == 0])
    assert "Orlen Studios was founded by Ilse Parrow" in injected and "<micro_response>" in injected
    own = tokenizer.decode([i for i, m in zip(t.response_ids, t.loss_mask) if m == 1])
    assert "<micro_response>" not in own and "<macro_result>" not in own and "<key_info_save>" in own


def test_a_malformed_save_is_a_recorded_format_failure_not_a_crash(tokenizer):
    llm = ScriptLLM(tokenizer, _policy("{founder: Ilse Parrow"))
    [res] = m2r.run_m2r(llm, ["Who founded Orlen Studios?"], m2r.MacroTool(FakeRetriever(), k=1))
    assert res.store.values == {} and "not valid JSON" in res.store.errors[0]
    assert not res.parse.format_valid and "not valid JSON" in res.parse.error
    assert "could not be retrieved" in res.trajectory.results[-1]  # the micro call found nothing saved


def test_micro_responses_have_loss_mask_0_on_a_real_smollm2_tokenization(tokenizer):
    """Replay (what the warm start trains on and what a rollout of the same text holds): every token
    of each <micro_response> and <macro_result> block is masked, every token the agent wrote is not."""
    turns = [("model", "<think>I need the founder.</think>\n<macro_tool_call>Orlen Studios founder</macro_tool_call>"),
             ("env", "Doc 1 (Orlen Studios) Orlen Studios was founded by Ilse Parrow."),
             ("model", '<think>Found it.</think>\n<key_info_save>{"founder of Orlen Studios": "Ilse Parrow"}'
                       "</key_info_save>"),
             ("env", ""),
             ("model", "<answer><micro_tool_call>founder of Orlen Studios</micro_tool_call>"),
             ("env", '{"founder of Orlen Studios": "Ilse Parrow"}'),
             ("model", "The founder is \\boxed{Ilse Parrow}.</answer>")]
    prompt = ScriptLLM(tokenizer, None).encode_chat(m2r.m2r_messages("Who founded Orlen Studios?"))
    t = replay(tokenizer, prompt, turns, m2r.default_m2r_params(), m2r.STOP_TAGS, m2r.RESULT_TAGS)
    assert m2r.parse_m2r(t.response_text).format_valid
    pieces, run, mask = [], [], None
    for i, m in zip(t.response_ids, t.loss_mask):  # maximal runs of equal mask, decoded
        if m != mask and run:
            pieces.append((mask, tokenizer.decode(run)))
            run = []
        run.append(i)
        mask = m
    pieces.append((mask, tokenizer.decode(run)))
    masked = [text for m, text in pieces if m == 0]
    assert masked[0] == "<think>"  # the response prefix
    assert any(t.strip().startswith("<macro_result>") and t.strip().endswith("</macro_result>") for t in masked)
    micro = [text for text in masked if "<micro_response>" in text]
    assert len(micro) == 1
    assert micro[0].strip() == '<micro_response>\n{"founder of Orlen Studios": "Ilse Parrow"}\n</micro_response>'
    trained = "".join(text for m, text in pieces if m == 1)
    assert "Ilse Parrow\"}" in trained and "\\boxed{Ilse Parrow}" in trained  # the save and the answer are trained
    assert "<micro_response>" not in trained and "was founded by" not in trained
    labels = sft_example(t)["labels"][len(prompt):]
    assert all((label == IGNORE_INDEX) == (m == 0) for label, m in zip(labels, t.loss_mask))
