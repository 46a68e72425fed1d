// Annotation page: one pair at a time, labels saved to the server on each choice (resumable).
// Model text is inserted with textContent only.
"use strict";
const params = new URLSearchParams(location.search);
const who = params.get("annotator") || "";
const adjudicate = params.get("adjudicate") === "1";
let ids = [], labels = {}, index = 0;

const $ = (id) => document.getElementById(id);

async function api(path, body) {
  const opt = body ? {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)} : {};
  const r = await fetch(path, opt);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.status);
  return data;
}

function showProgress() {
  const done = Object.keys(labels).length;
  $("progress").textContent = `${done} / ${ids.length} labelled`;
  $("bar").max = Math.max(ids.length, 1);
  $("bar").value = done;
}

async function show(i) {
  if (!ids.length) { $("current").textContent = "nothing to label"; return; }
  index = Math.max(0, Math.min(i, ids.length - 1));
  const p = await api(`/api/pair?id=${ids[index]}&annotator=${encodeURIComponent(who)}` + (adjudicate ? "&adjudicate=1" : ""));
  $("problem").textContent = p.problem;
  $("left").textContent = p.left;
  $("right").textContent = p.right;
  const lab = labels[String(ids[index])];
  $("same").classList.toggle("chosen", lab === 0);
  $("different").classList.toggle("chosen", lab === 1);
  $("current").textContent = `pair ${index + 1} of ${ids.length}` + (lab === undefined ? "" : lab ? " — different" : " — same");
  document.body.dataset.pair = String(ids[index]);
  document.body.dataset.label = lab === undefined ? "" : String(lab);
}

async function choose(label) {
  if (!ids.length) return;
  const pid = ids[index];
  const body = adjudicate ? {adjudicator: who, pair_id: pid, label} : {annotator: who, pair_id: pid, label};
  try {
    await api(adjudicate ? "/api/adjudicate" : "/api/label", body);
  } catch (e) { $("status").textContent = "not saved: " + e.message; return; }
  labels[String(pid)] = label === "same" ? 0 : 1;
  $("status").textContent = `saved pair ${index + 1}: ${label}`;
  showProgress();
  const next = ids.findIndex((id, k) => k > index && labels[String(id)] === undefined);
  await show(next === -1 ? Math.min(index + 1, ids.length - 1) : next);
}

// The annotator chooser: the audit's annotators, and adjudication (as C unless the URL names another).
function fillChooser(names) {
  const pick = $("pick");
  const options = names.map((n) => [n, `?annotator=${encodeURIComponent(n)}`]);
  const judge = adjudicate && who ? who : "C";
  options.push([`${judge} (adjudication)`, `?annotator=${encodeURIComponent(judge)}&adjudicate=1`]);
  if (!who) options.unshift(["choose…", ""]);
  const current = who ? `?annotator=${encodeURIComponent(who)}` + (adjudicate ? "&adjudicate=1" : "") : "";
  if (who && !options.some(([, v]) => v === current)) options.unshift([`${who} (unknown)`, current]);
  pick.replaceChildren(...options.map(([text, value]) => {
    const o = document.createElement("option");
    o.textContent = text; o.value = value; o.selected = value === current;
    return o;
  }));
  pick.onchange = () => { if (pick.value) location.search = pick.value; };
}

function stop(message) {
  $("status").textContent = message;
  $("current").textContent = message;
  document.body.dataset.ready = "1";
}

async function start() {
  $("who").textContent = adjudicate ? "adjudicator" : "annotator";
  let people;
  try { people = await api("/api/people"); } catch (e) { return stop("error: " + e.message); }
  fillChooser(people.annotators);
  if (!people.pairs) { $("progress").textContent = "nothing to label"; return stop(people.message); }
  if (!who) { $("progress").textContent = ""; return stop("choose the annotator above to start"); }
  try {
    const q = await api(`/api/queue?annotator=${encodeURIComponent(who)}` + (adjudicate ? "&adjudicate=1" : ""));
    ids = q.ids; labels = q.labels;
  } catch (e) { return stop("error: " + e.message); }
  showProgress();
  const first = ids.findIndex((id) => labels[String(id)] === undefined);
  await show(first === -1 ? 0 : first);
  document.body.dataset.ready = "1";
}

document.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const k = ev.key.toLowerCase();
  if (k === "s" || k === "1") choose("same");
  else if (k === "d" || k === "2") choose("different");
  else if (k === "j" || k === "arrowright") show(index + 1);
  else if (k === "k" || k === "arrowleft") show(index - 1);
});
$("same").onclick = () => choose("same");
$("different").onclick = () => choose("different");
$("next").onclick = () => show(index + 1);
$("prev").onclick = () => show(index - 1);
start();
