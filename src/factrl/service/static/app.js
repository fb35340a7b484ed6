// factrl serve's page: submit, poll the job, render the text with its claims highlighted by verdict,
// one card per claim (verdict, confidence, citations in their passages, trace), and the review form.
"use strict";

const $ = (id) => document.getElementById(id);
const LABELS = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"];

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers() });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${response.status}: ${body.detail || response.statusText}`);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

const NEI = "NOT ENOUGH INFO";

function verdictClass(result) {
  if (!result) return "pending";
  if (result.status === "failed") return "failed";
  if (result.verdict === NEI) return "NEI";
  return result.verdict || "none";
}

// cost and latency for people: "$0 (local)", "$0.0012", "4.7 s"
function formatCost(usd) {
  if (usd == null) return "unknown";
  if (usd === 0) return "$0 (local)";
  return "$" + (usd < 0.01 ? usd.toPrecision(2) : usd.toFixed(2));
}

function formatSeconds(s) {
  if (s == null) return "n/a";
  return s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

function renderText(job) {
  const box = $("text");
  box.replaceChildren();
  if (!job.text) return;
  const byIndex = Object.fromEntries(job.results.map((r) => [r.index, r]));
  let at = 0;
  const p = el("p");
  for (const c of job.claims) {
    p.append(job.text.slice(at, c.start));
    const r = byIndex[c.index];
    const label = r ? `${r.verdict || r.status}${r.confidence != null ? " " + r.confidence.toFixed(2) : ""}` : "pending";
    const span = el("span", { class: "claim " + verdictClass(r), title: label, "data-index": c.index },
                    job.text.slice(c.start, c.end));
    span.onclick = () => document.getElementById("card-" + c.index)?.scrollIntoView({ behavior: "smooth" });
    p.append(span);
    at = c.end;
  }
  p.append(job.text.slice(at));
  box.append(p);
}

function passageWithQuote(c) {
  if (!c.passage_text) return el("div", { class: "passage" }, el("span", { class: "quote" }, c.quote));
  return el("div", { class: "passage" }, c.passage_text.slice(0, c.start),
            el("span", { class: "quote" }, c.passage_text.slice(c.start, c.end)), c.passage_text.slice(c.end));
}

function reviewForm(jobId, r) {
  const form = el("div", { class: "row" });
  const select = el("select", { name: "verdict" });
  for (const label of LABELS) {
    const option = el("option", { value: label }, label);
    if (label === r.verdict) option.selected = true;
    select.append(option);
  }
  const passage = el("select", { name: "passage" }, el("option", { value: "" }, "(no settling passage)"));
  for (const c of r.citations) passage.append(el("option", { value: c.passage_id }, `${c.passage_id} ${c.title || ""}`));
  const reviewer = el("input", { name: "reviewer", placeholder: "reviewer name", size: 14 });
  reviewer.value = localStorage.getItem("factrl-reviewer") || "";
  const status = el("span", { class: "meta" });
  const save = el("button", {}, "Save review");
  save.onclick = async () => {
    localStorage.setItem("factrl-reviewer", reviewer.value);
    try {
      const stored = await api("/v1/corrections", { method: "POST", body: JSON.stringify({
        job_id: jobId, index: r.index, corrected_verdict: select.value, reviewer: reviewer.value,
        passage_id: passage.value || null }) });
      status.className = "saved";
      status.textContent = `saved #${stored.id} (${stored.accepted ? "accepted" : "corrected"})`;
    } catch (err) { status.className = "meta"; status.textContent = err.message; }
  };
  form.append("review:", select, passage, reviewer, save, status);
  return form;
}

function renderCard(jobId, r) {
  const card = el("div", { class: "card", id: "card-" + r.index });
  card.append(el("h3", {}, r.claim));
  if (r.status === "failed") {
    card.append(el("div", { class: "meta" }, "failed: " + r.error));
    return card;
  }
  const confidence = r.confidence == null ? "n/a" : r.confidence.toFixed(2);
  card.append(el("div", {}, el("span", { class: "verdict " + verdictClass(r) }, r.verdict || "no verdict"),
                 ` confidence ${confidence}${r.calibrated ? " (calibrated)" : " (raw, uncalibrated)"}`));
  card.append(el("div", { class: "meta checkpoint" }, `answered by checkpoint ${r.checkpoint}`));
  if (r.verdict === NEI) {
    // the run's evidence does not bear on the claim: say so, why, and what was searched
    const a = r.abstention || {};
    const box = el("div", { class: "nei" }, el("b", {}, "Not enough evidence in this corpus"),
                   ` (the model wrote ${r.model_verdict || "no verdict"}).`);
    const why = el("ul", { class: "reasons" });
    for (const reason of a.reasons || []) why.append(el("li", {}, reason));
    box.append(why, el("div", { class: "searched" },
                       "searched: " + ((a.searched || []).join(" | ") || "nothing")));
    card.append(box);
  }
  if (!r.verdict) {
    // a model that wrote no valid verdict (an untrained or tiny checkpoint): say why, from the trace
    const why = r.trace.format_error || "the reasoning agent gave no answer";
    card.append(el("div", { class: "meta noverdict" }, `no verdict: ${why}` +
                   (r.trace.finish_reason === "length" ? " (stopped at the token limit)" : "")));
  }
  const u = r.usage || {};
  card.append(el("div", { class: "meta" },
    `${u.model_calls} model calls, ${u.tokens_in} tokens in / ${u.tokens_out} out${u.estimated ? " (estimated)" : ""}, ` +
    `cost ${formatCost(r.cost_usd)}, latency ${formatSeconds(r.latency_s)}, batch of ${r.batch_size}`));
  card.append(el("h4", {}, `Citations (${r.citations.length})`));
  for (const c of r.citations) {
    card.append(el("div", {}, el("b", {}, c.title || c.passage_id), ` [${c.passage_id}] chars ${c.start}-${c.end}`,
                   el("span", { class: "meta" }, ` for: ${c.question}`)));
    card.append(passageWithQuote(c));
  }
  const trace = el("details", {}, el("summary", {}, `Trace: ${r.trace.questions.length} questions`));
  for (const q of r.trace.questions) {
    trace.append(el("div", {}, el("b", {}, "Q: "), q.question));
    trace.append(el("div", { class: "meta" }, "searches: " + q.searches.join(" | ") +
                    " ; found: " + q.retrieved.map((h) => h.title || h.id).join(", ")));
    trace.append(el("div", {}, el("b", {}, "report: "), q.report || "(none; passages passed on)"));
  }
  trace.append(el("pre", {}, r.trace.reasoning));
  card.append(trace, reviewForm(jobId, r));
  return card;
}

// a claim still running: a spinner and the seconds since the request was sent (a first claim on a
// CPU takes tens of seconds; "0 / 1 claims done" alone looks stuck)
function pendingCard(c, started) {
  const card = el("div", { class: "card pending-card", id: "pending-" + c.index },
                  el("h3", {}, c.claim), el("span", { class: "spinner" }), el("span", { class: "elapsed meta" }, ""));
  const tick = () => {
    if (!card.isConnected) return;
    card.querySelector(".elapsed").textContent = ` verifying… ${formatSeconds((Date.now() - started) / 1000)}`;
    setTimeout(tick, 200);
  };
  tick();
  return card;
}

let started = 0;

async function poll(jobId) {
  const job = await api(`/v1/jobs/${jobId}`);
  $("progress").textContent = `${job.done} / ${job.total} claims done${job.failed ? `, ${job.failed} failed` : ""}` +
    `, ${formatSeconds((Date.now() - started) / 1000)}`;
  renderText(job);
  const results = $("results");
  const done = new Set(job.results.map((r) => r.index));
  for (const c of job.claims) {
    if (!done.has(c.index) && !document.getElementById("pending-" + c.index)) results.append(pendingCard(c, started));
  }
  for (const r of job.results) {
    if (!document.getElementById("card-" + r.index)) {
      const card = renderCard(jobId, r);
      const pending = document.getElementById("pending-" + r.index);
      if (pending) pending.replaceWith(card); else results.append(card);
    }
  }
  if (job.status !== "done") setTimeout(() => poll(jobId).catch(finish), 500);
  else finish();
}

// the button is disabled while a request runs: a second click would start a second job
function finish(err) {
  $("submit").disabled = false;
  if (err) $("progress").textContent = err.message;
}

function showError(err) { finish(err); }

async function submit() {
  const kind = document.querySelector("input[name=kind]:checked").value;
  $("results").replaceChildren();
  $("text").replaceChildren();
  $("submit").disabled = true;
  started = Date.now();
  try {
    const job = await api("/v1/verify", { method: "POST", body: JSON.stringify({
      [kind]: $("input").value, checkpoint: $("checkpoint").value || null }) });
    $("progress").textContent = `job ${job.job_id}: ${job.total} claims queued`;
    await poll(job.job_id);
  } catch (err) { showError(err); }
}

$("submit").onclick = submit;

// A link can carry the check to run: #claim=... or #text=... (URL-encoded) fills the form and
// submits it, so a verdict page can be shared or opened from another tool.
function fromLink() {
  const args = new URLSearchParams(location.hash.slice(1));
  for (const kind of ["claim", "text"]) {
    if (!args.get(kind)) continue;
    document.querySelector(`input[name=kind][value=${kind}]`).checked = true;
    $("input").value = args.get(kind);
    submit();
    return;
  }
}

$("token").value = sessionStorage.getItem("factrl-token") || "";
$("token").onchange = () => sessionStorage.setItem("factrl-token", $("token").value);
// which corpus and checkpoint answer, and examples drawn from the served corpus (GET /page-info)
let pageInfo = {};

function answeringLine() {
  const name = $("checkpoint").value;
  const m = (pageInfo.models || {})[name] || {};
  const corpus = pageInfo.corpus || {};
  const calibrated = (pageInfo.calibrated || {})[name] ? "calibrated" : "uncalibrated";
  $("answering").textContent = `Answering from the index ${corpus.index || "?"} (${corpus.passages ?? "?"} passages) ` +
    `with checkpoint ${name} (reasoning ${m.reason || "?"}, search ${m.search || "?"}; ${calibrated} confidence).`;
}

function showExamples(examples) {
  const list = $("examples");
  list.replaceChildren();
  for (const e of examples) {
    const item = el("li", {}, el("a", { href: "#" }, e.claim), el("span", { class: "meta" }, ` (${e.kind})`));
    item.querySelector("a").onclick = (event) => {
      event.preventDefault();
      document.querySelector("input[name=kind][value=claim]").checked = true;
      $("input").value = e.claim;
    };
    list.append(item);
  }
  if (examples.length) $("input").placeholder = examples[0].claim;
}

$("checkpoint").onchange = answeringLine;
fetch("/healthz").then((r) => r.json()).then((h) => {
  for (const name of h.checkpoints) $("checkpoint").append(el("option", { value: name }, name));
  return fetch("/page-info").then((r) => r.json());
}).then((info) => {
  pageInfo = info;
  showExamples(info.examples || []);
  answeringLine();
}).catch(() => {}).finally(fromLink);
