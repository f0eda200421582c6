// Training on the page: a training lab runs as a job on the server (POST /api/runs), the page
// polls it (GET /api/runs/{id}?since=K) for the loss of each new step and draws the curve as it
// grows, Stop cancels it (DELETE /api/runs/{id}), and a finished train-induction run opens in
// the multi-head view's learned mode (mh.run in the URL). The labs run at the CLI's defaults.
import { api, clearError, el, showError } from "./common.js";
import { drawLines, legend } from "./linechart.js";
import { redrawAll, writeUrl } from "./state.js";

let root = null;
const $ = (sel) => root.querySelector(sel);
let run = null; // { id, lab, losses, steps, state }
let timer = null;

const FINISHED = ["done", "failed", "cancelled"];
// The models a lab trains one after the other (their steps follow on in one counter), each its
// own line: train-positions with positions then without, train-scaling (at its default of one
// width and one run) scaled then unscaled.
const MODELS = {
  "train-induction": ["training loss per step (nats)"],
  "train-positions": ["with learned positions", "without positions"],
  "train-scaling": ["scaled by 1/√d_k", "unscaled"],
};

const curves = (lab) => (MODELS[lab] || MODELS["train-induction"]).map((name, i) => ({ name, cls: `c${i}` }));

function draw() {
  const lines = curves(run.lab);
  const each = Math.ceil((run.steps || 1) / lines.length);
  const series = lines.map((line, i) => ({ ...line,
    y: run.losses.map((v, j) => (Math.floor(j / each) === i ? v : null)) }));
  drawLines($("#run-chart"), series, { xMax: run.steps, xLabel: "step", yLabel: "loss" });
  $("#run-key").replaceChildren(legend(lines));
  $("#run-chart").setAttribute("aria-label", run.losses.length
    ? `Training loss over ${run.losses.length} steps: from ${run.losses[0].toFixed(2)} to ${run.losses.at(-1).toFixed(2)} nats`
    : "Training loss: no step yet");
}

function status(body) {
  const where = body.state === "queued" ? `queued, place ${body.position} in line`
    : body.state === "running" ? "training"
    : body.state === "done" ? "done"
    : body.state === "cancelled" ? "stopped"
    : `failed: ${body.error}`;
  $("#run-status").textContent = `${body.lab}: step ${body.step} of ${body.steps}, ${where}`;
  $("#run-progress").max = body.steps || 1;
  $("#run-progress").value = body.step;
  root.dataset.run = body.state;
}

function finish(body) {
  $("#run-start").disabled = false;
  $("#run-stop").disabled = true;
  if (body.state === "done") {
    $("#run-summary").replaceChildren(...body.summary.map((line) => el("li", { text: line })));
    $("#run-open").hidden = !body.learned;
  }
}

async function poll() {
  if (!run) return;
  let body;
  try {
    body = await api(`/api/runs/${run.id}?since=${run.losses.length}`);
  } catch (err) {
    showError($("#run-error"), err);
    return;
  }
  if (body.since === run.losses.length) run.losses.push(...body.losses);
  run.steps = body.steps;
  status(body);
  draw();
  if (FINISHED.includes(body.state)) finish(body);
  else timer = setTimeout(poll, 300); // ask again in 0.3 s: a live curve without a flood
}

async function start(event) {
  event.preventDefault();
  clearTimeout(timer);
  clearError($("#run-error"));
  const lab = $("#run-form").elements.lab.value;
  $("#run-summary").replaceChildren();
  $("#run-open").hidden = true;
  let made;
  try {
    made = await api("/api/runs", { method: "POST", body: { lab, params: {} } });
  } catch (err) {
    showError($("#run-error"), err);
    return;
  }
  run = { id: made.id, lab, losses: [], steps: 0 };
  $("#run-start").disabled = true;
  $("#run-stop").disabled = false;
  $("#run-stop").focus();
  poll();
}

async function stop() {
  if (!run) return;
  try {
    const body = await api(`/api/runs/${run.id}`, { method: "DELETE" });
    clearTimeout(timer);
    status(body);
    finish(body);
    $("#run-start").focus();
  } catch (err) {
    showError($("#run-error"), err);
  }
}

async function open() {
  writeUrl({ "mh.mode": "learned", "mh.run": run.id, "mh.tokens": null, "mh.checkpoint": null });
  await redrawAll();
  const figure = document.getElementById("figure-multi-head");
  figure.scrollIntoView({ block: "start" });
  figure.focus({ preventScroll: true });
}

export function init() {
  root = document.getElementById("runs");
  $("#run-form").addEventListener("submit", start);
  $("#run-stop").addEventListener("click", stop);
  $("#run-open").addEventListener("click", open);
  run = { lab: "train-induction", losses: [], steps: 0 };
  draw();
  run = null;
}
