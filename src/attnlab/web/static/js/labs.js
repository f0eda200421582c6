// Labs: run any lab of attnlab.labs with its parameters and seed (GET /api/labs/NAME).
import { api, clearError, el, fmt, plot, showError } from "./common.js";

const root = document.getElementById("labs");
const $ = (sel) => root.querySelector(sel);
let catalogue = [];
let current = null;

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
  $("#lab-status").textContent = "";
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
}

async function run(event) {
  event.preventDefault();
  const lab = current;
  $("#lab-status").textContent = `Running ${lab.title}…`;
  $("#lab-run").disabled = true;
  try {
    const result = await api(`/api/labs/${lab.name}?${query(lab)}`);
    clearError($("#lab-error"));
    showFigure(result.plot);
    drawTable(result.table);
    $("#lab-words").replaceChildren(...result.summary.map((line) => el("span", { text: `${line} ` })));
    $("#lab-status").textContent = `${lab.title}: done.`;
    root.dataset.lab = lab.name;
  } catch (err) {
    showError($("#lab-error"), err);
    $("#lab-status").textContent = "";
  } finally {
    $("#lab-run").disabled = false;
  }
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
  select(catalogue[0].name);
}
