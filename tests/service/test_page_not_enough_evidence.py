"""The page's not-enough-evidence state in headless Chromium (issue 49): the real app, engine and
abstention over a demo world's BM25 index, with scripted HARIS agents that ask about the claim's subject,
report the first passage found and always write Support (what a small model does). "Paris is the capital
of France." must show NOT ENOUGH INFO, "not enough evidence in this corpus", the failed rules and what was
searched; the page's own first example, drawn from the served corpus, a verdict with its citation. The
screenshots go to docs/service-page/ when FACTRL_SCREENSHOTS names it."""

from __future__ import annotations

import os
import shutil

import pytest

from factrl.agents.abstain import named_entities
from factrl.service.engine import HarisVerifier
from factrl.service.examples import OUTSIDE_EXAMPLE, corpus_examples
from factrl.service.params import ServeParams
from factrl.service.state import start_service
from factrl.testing.servers import running_app
from factrl.testing.service_fakes import PROVENANCE, app_of
from tests.conftest import CHROMIUM, NO_CHROMIUM


def subject_asker(prompt: str) -> str:
    """Reasoning: ask about the claim's subject, then Support; search: search the question, report Doc 1."""
    if "You collect the information" in prompt:
        tail = prompt.rsplit("Question: ", 1)[-1]
        if "Doc 1 (" in tail:
            return "<report>" + tail.split("Doc 1 (", 1)[1].split("\n")[0].split(") ", 1)[1] + "</report>"
        return f"x</think><search>{tail.split('<|im_end|>')[0].strip()}</search>"
    tail = prompt.rsplit("Claim: ", 1)[-1]
    if "<result>" in tail:
        return "ok</think><verification>\\boxed{Support}</verification>"
    claim = tail.split("<|im_end|>")[0].strip()
    return f"need it</think><question>What is {(named_entities(claim) or ['it'])[0]}?</question>"


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_page_shows_not_enough_evidence_for_paris_and_a_verdict_for_its_own_example(
        tmp_path, demo_world, demo_retriever, script_llm):
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    _, index_dir = demo_world
    llm = script_llm(subject_asker)
    verifier = HarisVerifier("HARIS (scripted)", llm, llm, demo_retriever, "smollm2-135m", "smollm2-135m",
                             top_k=3, max_turns=2)
    info = {"models": {"HARIS (scripted)": {"reason": "scripted", "search": "scripted"}},
            "calibrated": {"HARIS (scripted)": False}, **corpus_examples(index_dir)}
    params = ServeParams(corrections_db=str(tmp_path / "c.sqlite"), max_wait_ms=20)
    service = start_service(params, {"HARIS (scripted)": verifier}, {"HARIS (scripted)": PROVENANCE}, info=info)
    shots = []
    try:
        with running_app(app_of(service)) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.set_default_timeout(120_000)
            page.goto(url + "/")
            page.wait_for_selector("#examples li")
            assert "passages" in page.locator("#answering").text_content()
            assert "HARIS (scripted)" in page.locator("#answering").text_content()
            example = info["examples"][0]["claim"]
            assert page.locator("#input").get_attribute("placeholder") == example

            def shot(name: str) -> None:
                path = tmp_path / f"nei-{name}.png"
                page.screenshot(path=str(path), full_page=True)
                shots.append(path)

            page.fill("#input", OUTSIDE_EXAMPLE)
            page.click("#submit")
            assert page.locator("#submit").is_disabled()  # while the request runs
            page.wait_for_selector("#card-0 .nei")
            card = page.locator("#card-0")
            assert card.locator(".verdict").text_content() == "NOT ENOUGH INFO"
            assert "Not enough evidence in this corpus" in card.locator(".nei").text_content()
            assert "'Paris'" in card.locator(".reasons").text_content()
            assert card.locator(".searched").text_content().startswith("searched: What is Paris?")
            assert "answered by checkpoint HARIS (scripted)" in card.text_content()
            assert "$0 (local)" in card.text_content() and "latency" in card.text_content()
            page.wait_for_function("!document.getElementById('submit').disabled")
            shot("1-paris")

            page.locator("#examples li a").first.click()
            assert page.locator("#input").input_value() == example
            page.click("#submit")
            page.wait_for_selector("#card-0 .verdict")
            card = page.locator("#card-0")
            assert card.locator(".verdict").text_content() == "SUPPORTS", card.text_content()
            assert card.locator(".quote").count() >= 1 and not card.locator(".nei").count()
            shot("2-example")
            browser.close()
    finally:
        service.worker.stop()
    if os.environ.get("FACTRL_SCREENSHOTS"):
        for path in shots:
            shutil.copy(path, os.environ["FACTRL_SCREENSHOTS"])
