// The learned view's knock-out panel: press a head to zero its output (press again to bring it
// back) and see what the model loses, measured by the server on fresh repeated sequences
// (GET /api/learned/ablation): accuracy on the second copy, and the loss at each offset of the
// repeat, intact beside knocked out. It follows the model the learned view shows (the shipped
// one, or a run trained on this page) through learned.js's "learned:shown" event.
import { api, clearError, el, showError } from "./common.js";
import { current } from "./learned.js";
import { drawLines, legend } from "./linechart.js";

let root = null;
const $ = (sel) => root.querySelector(sel);
let shown = null; // { data, run } of the learned view
const off = new Set(); // "layer.head" knocked out
let asked = 0; // the latest request, so a slow answer never overwrites a newer one

const KEY = [
  { name: "second copy, intact", cls: "c0" },
  { name: "second copy, heads knocked out", cls: "c1" },
  { name: "first copy, intact (nothing to copy)", cls: "c2", dash: true },
];

const pct = (x) => `${(100 * x).toFixed(1)}%`;

function buttons() {
  const { layers, heads } = shown.data.config;
  const labels = new Map(shown.data.heads.map((x) => [`${x.layer}.${x.head}`, x.pattern]));
  $("#knock-heads").replaceChildren(...[...Array(layers).keys()].map((l) => el("div", { class: "knock-layer" },
    el("span", { class: "knock-layer-name", text: `Layer ${l}` }),
    [...Array(heads).keys()].map((h) => {
      const key = `${l}.${h}`;
      return el("button", { type: "button", class: "knock-head", "data-head": key, "aria-pressed": off.has(key) ? "true" : "false",
        onclick: () => toggle(key), text: `head ${h}`, title: labels.get(key) || "" },
      el("span", { class: "knock-pattern", text: ` ${labels.get(key) || ""}` }));
    }))));
}

function toggle(key) {
  if (off.has(key)) off.delete(key);
  else off.add(key);
  root.querySelector(`[data-head="${key}"]`)?.setAttribute("aria-pressed", off.has(key) ? "true" : "false");
  measure();
}

function row(name, a) {
  return el("tr", {}, el("th", { scope: "row", text: name }), el("td", { text: pct(a.accuracy) }),
    el("td", { text: a.second_mean.toFixed(2) }), el("td", { text: a.first_mean.toFixed(2) }));
}

async function measure() {
  if (!shown) return;
  const mine = ++asked;
  const params = new URLSearchParams({ ablate: [...off].join(","), ablation: $("#knock-mode").value });
  if (shown.run) params.set("run", shown.run);
  params.set("tokens", shown.data.tokens.join(" "));
  $("#knock-result").textContent = "Measuring…";
  let body;
  try {
    body = await api(`/api/learned/ablation?${params}`);
  } catch (err) {
    if (mine === asked) showError($("#knock-error"), err);
    return;
  }
  if (mine !== asked) return;
  clearError($("#knock-error"));
  const names = body.ablate.map(([l, h]) => `layer ${l} head ${h}`).join(", ") || "no head";
  $("#knock-result").textContent = `Knocked out: ${names}. Accuracy on the second copy of ${body.fresh} fresh repeated sequences: ` +
    `${pct(body.intact.accuracy)} intact, ${pct(body.ablated.accuracy)} without (${body.ablated.accuracy >= body.intact.accuracy ? "+" : "−"}` +
    `${(100 * Math.abs(body.ablated.accuracy - body.intact.accuracy)).toFixed(1)} points).`;
  $("#knock-table").replaceChildren(
    el("caption", { text: "Accuracy and mean loss (nats)" }),
    el("tr", {}, ["", "accuracy", "loss, 2nd copy", "loss, 1st copy"].map((t) => el("th", { scope: "col", text: t }))),
    row("intact", body.intact), row("knocked out", body.ablated));
  const series = [
    { ...KEY[0], y: body.intact.second_copy },
    { ...KEY[1], y: body.ablated.second_copy },
    { ...KEY[2], y: body.intact.first_copy },
  ];
  drawLines($("#knock-chart"), series, { xLabel: "offset", yLabel: "loss per offset" });
  $("#knock-chart").setAttribute("aria-label", `Loss at each offset of the repeat's second copy: mean ${body.intact.second_mean.toFixed(2)} nats intact, ` +
    `${body.ablated.second_mean.toFixed(2)} with ${names} knocked out; the first copy, which cannot be predicted, ${body.intact.first_mean.toFixed(2)}.`);
  root.dataset.knocked = [...off].join(",") || "none";
}

function follow(detail) {
  const model = detail.run ? `run ${detail.run}` : "shipped";
  const changed = !shown || (shown.run || null) !== (detail.run || null);
  shown = detail;
  if (changed) off.clear();
  root.dataset.model = model;
  $("#knock-model").textContent = detail.run ? `Model: the one trained on this page (run ${detail.run}).` : "Model: the shipped one.";
  buttons();
  measure();
}

export function init() {
  root = document.getElementById("learned-knock");
  $("#knock-mode").addEventListener("change", measure);
  $("#knock-key").replaceChildren(legend(KEY));
  document.getElementById("figure-multi-head").addEventListener("learned:shown", (event) => follow(event.detail));
  if (current()) follow(current());
}
