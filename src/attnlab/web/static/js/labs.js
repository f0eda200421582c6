// Labs: run any lab of attnlab.labs with its parameters and seed (GET /api/labs/NAME). A
// training lab (tens of seconds at the CLI's defaults) runs as a job instead, on the server's
// runs queue (POST /api/runs), with a progress bar and Stop; either way the result comes with
// its claim, and a run that falls short of the claim says so beside it.
import { api, clearError, el, fmt, plot, showError } from "./common.js";

const root = document.getElementById("labs");
const $ = (sel) => root.querySelector(sel);
let catalogue = [];
let current = null;
let job = null; // { id, lab } of the training run in progress
let timer = null;
const FINISHED = ["done", "failed", "cancelled"];

// The form's values as typed JSON for a run (the runs route takes numbers, not strings).
function values(lab) {
  const out = {};
  for (const p of lab.params) {
    const input = $(`#lab-param-${p.name}`);
    if (!input) continue;
    const text = input.value.trim();
    const number = (x) => (p.type === "string" || p.enum ? x : Number(x));
    out[p.name] = p.type === "list" ? text.split(/[\s,]+/).filter(Boolean).map(Number) : number(text);
  }
  return out;
}

function query(lab, extra = {}) {
  const params = new URLSearchParams();
  for (const p of lab.params) {
    const input = $(`#lab-param-${p.name}`);
    if (!input) continue;
    const value = input.value.trim();
    if (p.type === "list") value.split(/[\s,]+/).filter(Boolean).forEach((v) => params.append(p.name, v));
    else params.append(p.name, value);
  }
  for (const [key, value] of Object.entries(extra)) params.append(key, value);
  return params.toString();
}

function input(p) {
  const id = `lab-param-${p.name}`;
  const hint = [p.min !== null && p.min !== undefined ? `from ${p.min}` : "", p.max !== null && p.max !== undefined ? `to ${p.max}` : ""].filter(Boolean).join(" ");
  const described = `${p.description || p.name}${hint ? ` (${hint})` : ""}`;
  let control;
  if (p.enum) {
    control = el("select", { id, name: p.name }, p.enum.map((v) => el("option", { value: v, selected: v === p.default }, v)));
  } else if (p.type === "list") {
    control = el("input", { id, name: p.name, type: "text", value: (p.default || []).join(", "), inputmode: "numeric" });
  } else if (p.type === "string") {
    control = el("input", { id, name: p.name, type: "text", value: p.default ?? "" });
  } else {
    control = el("input", { id, name: p.name, type: "number", value: p.default ?? "", step: p.type === "integer" ? "1" : "any" });
  }
  return el("label", { for: id, title: described }, p.name === "seed" ? "seed" : p.name, control,
    el("span", { class: "sr-only", text: described }));
}

function select(name, focus = false) {
  if (job) { // a lab left while training: its run stops, as Stop would
    api(`/api/runs/${job.id}`, { method: "DELETE" }).catch(() => {});
    endJob();
  }
  current = catalogue.find((lab) => lab.name === name);
  root.querySelectorAll("#lab-tabs [role='tab']").forEach((tab) => {
    const on = tab.dataset.lab === name;
    tab.setAttribute("aria-selected", on ? "true" : "false");
    tab.tabIndex = on ? 0 : -1;
    if (on && focus) tab.focus();
  });
  $("#lab-panel").setAttribute("aria-label", current.title);
  // A new lab starts clean: no plot, table, status or error of the previous one.
  if (window.Plotly) window.Plotly.purge($("#lab-plot"));
  $("#lab-plot").replaceChildren();
  $("#lab-table-box").replaceChildren();
  $("#lab-table-box").removeAttribute("tabindex"); // no Tab stop on an empty box
  $("#lab-status").textContent = "";
  $("#lab-claim").hidden = true;
  clearError($("#lab-error"));
  delete root.dataset.lab;
  const form = $("#lab-form");
  $("#lab-doc").textContent = current.doc;
  form.replaceChildren(
    ...current.params.map(input),
    el("button", { type: "submit", id: "lab-run" }, "Run lab"),
    el("a", { id: "lab-csv", href: "#", download: "" }, "Download CSV"),
    el("a", { id: "lab-json", href: "#", download: "" }, "Download JSON"),
  );
  updateLinks();
  form.oninput = updateLinks;
}

function updateLinks() {
  if (!current) return;
  $("#lab-csv").href = `/api/labs/${current.name}?${query(current, { download: "csv" })}`;
  $("#lab-json").href = `/api/labs/${current.name}?${query(current, { download: "json" })}`;
}

// The route's plot is a whole Plotly figure, built once in Python (attnlab/labs/_plotly.py) and
// drawn as it is, so the page, --plot FILE.html and Jupyter show the same chart.
function showFigure(figure) {
  plot($("#lab-plot"), figure.data, figure.layout);
  $("#lab-plot").setAttribute("aria-label", `${figure.layout.title.text.split("<br>")[0]}. The table below lists every number plotted.`);
}

function drawTable(table) {
  const cell = (x) => (typeof x === "number" || x === null ? fmt(x) : String(x));
  $("#lab-table-box").replaceChildren(el("table", { class: "data", id: "lab-table" },
    el("caption", {}, "Every number the lab measured"),
    el("thead", {}, el("tr", {}, table.columns.map((c, i) => el("th", { scope: "col", title: c, "data-column": c, text: table.titles[i] })))),
    el("tbody", {}, table.rows.map((row) => el("tr", {}, row.map((x) => el("td", { "data-value": String(x), title: String(x), text: cell(x) })))))));
  $("#lab-table-box").tabIndex = 0; // it scrolls sideways: reachable by keyboard once it has a table
}

// The result as the server built it (web/labview.py): plot, table, words, and the claim's verdict.
function show(lab, result) {
  clearError($("#lab-error"));
  showFigure(result.plot);
  drawTable(result.table);
  $("#lab-words").replaceChildren(...result.summary.map((line) => el("span", { text: `${line} ` })));
  const claim = result.claim;
  const box = $("#lab-claim");
  box.hidden = !claim;
  if (claim) {
    box.dataset.held = String(claim.held);
    box.replaceChildren(el("strong", { text: claim.held ? "Shows the claim: " : "Falls short of the claim: " }),
      el("span", { text: `${claim.claim} ` }), el("span", { class: "why", text: `This run: ${claim.why}.` }));
  }
  $("#lab-status").textContent = claim
    ? `${lab.title}: ${claim.held ? "the run shows the claim" : "the run falls short of the claim (see below)"}.`
    : `${lab.title}: done.`;
  root.dataset.lab = lab.name;
}

function progress(body) {
  $("#lab-progress").max = body.steps || 1;
  $("#lab-progress").value = body.step;
  const where = body.state === "queued" ? `queued, place ${body.position} in line` : body.state;
  $("#lab-status").textContent = `${current.title}: step ${body.step} of ${body.steps}, ${where}`;
  root.dataset.job = body.state;
}

function endJob() {
  clearTimeout(timer);
  job = null;
  $("#lab-run").disabled = false;
  $("#lab-job").hidden = true;
}

async function poll() {
  if (!job) return;
  const mine = job;
  let body;
  try {
    body = await api(`/api/runs/${mine.id}?since=10000000`); // the bar needs no losses
  } catch (err) {
    showError($("#lab-error"), err);
    endJob();
    return;
  }
  if (job !== mine) return; // another lab was picked meanwhile
  progress(body);
  if (!FINISHED.includes(body.state)) {
    timer = setTimeout(poll, 300);
    return;
  }
  const lab = catalogue.find((l) => l.name === body.lab);
  endJob();
  if (body.state === "done") show(lab, body.shown);
  else if (body.state === "failed") showError($("#lab-error"), new Error(body.error));
  else $("#lab-status").textContent = `${lab.title}: stopped at step ${body.step} of ${body.steps}; no result.`;
}

async function startJob(lab) {
  const made = await api("/api/runs", { method: "POST", body: { lab: lab.name, params: values(lab) } });
  job = { id: made.id, lab: lab.name };
  $("#lab-job").hidden = false;
  $("#lab-progress").value = 0;
  $("#lab-stop").focus();
  poll();
}

async function stopJob() {
  if (!job) return;
  try {
    progress(await api(`/api/runs/${job.id}`, { method: "DELETE" }));
    const lab = current;
    endJob();
    $("#lab-status").textContent = `${lab.title}: stopped; no result.`;
    $("#lab-run").focus();
  } catch (err) {
    showError($("#lab-error"), err);
  }
}

async function run(event) {
  event.preventDefault();
  const lab = current;
  $("#lab-status").textContent = `Running ${lab.title}…`;
  $("#lab-claim").hidden = true;
  $("#lab-run").disabled = true;
  delete root.dataset.lab;
  try {
    if (lab.training) {
      await startJob(lab); // the button comes back when the job ends
      return;
    }
    show(lab, await api(`/api/labs/${lab.name}?${query(lab)}`));
  } catch (err) {
    showError($("#lab-error"), err);
    $("#lab-status").textContent = "";
  }
  if (!job) $("#lab-run").disabled = false;
}

function onTabKey(event) {
  const names = catalogue.map((lab) => lab.name);
  const at = names.indexOf(current.name);
  const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
  if (step) {
    event.preventDefault();
    select(names[(at + step + names.length) % names.length], true);
  }
}

export async function init() {
  catalogue = await api("/api/labs");
  $("#lab-tabs").replaceChildren(...catalogue.map((lab) => el("button", {
    type: "button", role: "tab", "data-lab": lab.name, "aria-controls": "lab-panel",
    onclick: () => select(lab.name), onkeydown: onTabKey,
  }, lab.title)));
  $("#lab-form").addEventListener("submit", run);
  $("#lab-stop").addEventListener("click", stopJob);
  select(catalogue[0].name);
}
