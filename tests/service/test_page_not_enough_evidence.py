"""The page's not-enough-evidence state in headless Chromium (issue 49): the real app, engine and
abstention over a demo world's BM25 index, with scripted HARIS agents that ask about the claim's subject,
report the first passage found and always write Support (what a small model does). "Paris is the capital
of France." must show NOT ENOUGH INFO, "not enough evidence in this corpus", the failed rules and what was
searched; the page's own first example, drawn from the served corpus, a verdict with its citation. The
screenshots go to docs/service-page/ when FACTRL_SCREENSHOTS names it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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


def open_page(p, url: str, timeout_ms: int):
    """(browser, page): headless Chromium on the service's page, its corpus examples listed."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_default_timeout(timeout_ms)
    page.goto(url + "/")
    page.wait_for_selector("#examples li")
    return browser, page


def shooter(page, folder, prefix: str, shots: list):
    """``shot(name)``: a full-page screenshot ``<prefix>-<name>.png`` in ``folder``, kept in ``shots``."""

    def shot(name: str) -> None:
        path = folder / f"{prefix}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(path)

    return shot


def keep_screenshots(shots: list) -> None:
    """Copy ``shots`` to the folder ``$FACTRL_SCREENSHOTS`` names, if it names one."""
    if os.environ.get("FACTRL_SCREENSHOTS"):
        for path in shots:
            shutil.copy(path, os.environ["FACTRL_SCREENSHOTS"])


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
            browser, page = open_page(p, url, 120_000)
            assert "passages" in page.locator("#answering").text_content()
            assert "HARIS (scripted)" in page.locator("#answering").text_content()
            example = info["examples"][0]["claim"]
            assert page.locator("#input").get_attribute("placeholder") == example
            shot = shooter(page, tmp_path, "nei", shots)

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
    keep_screenshots(shots)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
@pytest.mark.skipif(not os.environ.get("FACTRL_TRAINED_RUN"),
                    reason="FACTRL_TRAINED_RUN names no finished run (a `make demo` checkout) to serve")
def test_the_page_over_a_trained_run_says_not_enough_evidence_for_paris_and_cites_for_its_example(tmp_path):
    """The same two steps against a real ``factrl serve`` process over a finished run's trained pair
    (``$FACTRL_TRAINED_RUN``: a ``make demo`` checkout, round 1), its index, its calibration maps and its
    params' ``abstain`` rules: "Paris is the capital of France." shows NOT ENOUGH INFO with what was
    searched; the page's first example, a claim of the served corpus, a verdict with citations.
    Opt-in because it needs a run's checkpoints; the test above drives the same page with scripted agents."""
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    from factrl.agents.abstain import load_abstain_params
    from factrl.config import from_dict, read_params
    from factrl.eval.params import EvaluateParams
    from tests.service.page_driver import serve_process

    run = Path(os.environ["FACTRL_TRAINED_RUN"])
    evaluate = from_dict(EvaluateParams, read_params(run / "params.yaml").get("evaluate"),
                         where=f"{run / 'params.yaml'}:evaluate")
    checkpoint = {"name": "HARIS (trained)", "reason": str(run / "models" / "reason_1"),
                  "search": str(run / "models" / "search_1")}
    abstain = load_abstain_params(run / "params.yaml").rules()
    shots = []
    with serve_process(tmp_path, run / "index", checkpoint, max_turns=evaluate.max_turns,
                       max_new_tokens=evaluate.max_new_tokens, retrieval_mode=evaluate.retrieval_mode,
                       precision="auto", calibration_dir=run / "metrics" / "calibration", timeout=600,
                       abstain=abstain) as url, sync_playwright() as p:
        browser, page = open_page(p, url, 900_000)
        assert "HARIS (trained)" in page.locator("#answering").text_content()
        shot = shooter(page, tmp_path, "trained-nei", shots)

        page.fill("#input", OUTSIDE_EXAMPLE)
        page.click("#submit")
        page.wait_for_selector("#card-0 .verdict")
        page.wait_for_function("!document.getElementById('submit').disabled")
        card = page.locator("#card-0")
        shot("1-paris")
        assert card.locator(".verdict").text_content() == "NOT ENOUGH INFO", card.text_content()
        assert "Not enough evidence in this corpus" in card.locator(".nei").text_content()
        assert card.locator(".searched").text_content().startswith("searched: ")
        assert "answered by checkpoint HARIS (trained)" in card.text_content()

        page.locator("#examples li a").first.click()
        page.click("#submit")
        page.wait_for_selector("#card-0 .verdict")
        page.wait_for_function("!document.getElementById('submit').disabled")
        card = page.locator("#card-0")
        shot("2-example")
        assert card.locator(".verdict").text_content() in ("SUPPORTS", "REFUTES"), card.text_content()
        assert card.locator(".quote").count() >= 1 and not card.locator(".nei").count()
        browser.close()
    keep_screenshots(shots)
