// The √d_k proof as a page: /api/labs/proof measures each step; the reader reveals them one at a
// time. The d_k chooser takes its bounds and defaults from the lab's own spec (GET /api/labs).
import { api, clearError, el, fmt, grouped, showError } from "./common.js";

let rows = [];
let shown = 0;

function param(lab, name) {
  return lab.params.find((p) => p.name === name);
}

function stepItem(row, i) {
  const away = row.stderr > 0 ? Math.abs(row.measured - row.predicted) / row.stderr : 0;
  return el("li", {
    class: "why-step", "data-step": i + 1, "data-predicted": String(row.predicted),
    "data-measured": String(row.measured), "data-stderr": String(row.stderr), hidden: true, tabindex: "-1",
  },
  el("strong", { class: "why-step-name", text: row.step }),
  el("span", { class: "why-claim", text: ` — ${row.claim}` }),
  el("span", { class: "why-numbers" },
    el("span", {}, "predicted ", el("b", { text: fmt(row.predicted) })),
    el("span", {}, "measured ", el("b", { text: `${fmt(row.measured)} ± ${fmt(row.stderr)}` })),
    el("span", { class: away <= 2 ? "why-close" : "why-far", text: `${away.toFixed(1)} SE away` })));
}

function reveal(root, n) {
  shown = Math.max(0, Math.min(rows.length, n));
  const items = root.querySelectorAll(".why-step");
  items.forEach((li, i) => { li.hidden = i >= shown; });
  const next = root.querySelector("#why-proof-next");
  next.disabled = shown >= rows.length;
  next.textContent = shown >= rows.length ? "All seven steps shown" : `Next step (${shown + 1} of ${rows.length})`;
  root.querySelector("#why-proof-status").textContent = shown
    ? `Step ${shown} of ${rows.length}: ${rows[shown - 1].step}.` : "No step shown yet.";
  if (shown) items[shown - 1].focus?.({ preventScroll: true });
  if (shown >= rows.length) root.querySelector("#why-proof-again").focus();
  else if (shown) next.focus();
}

async function measure(root, lab) {
  const error = root.querySelector("#why-proof-error");
  const input = root.querySelector("#why-proof-dk");
  const dk = param(lab, "d_k");
  const value = Number(input.value);
  // Checked here, in words, rather than by the browser's silent form validation.
  if (input.value.trim() === "" || !Number.isInteger(value) || value < dk.min || value > dk.max) {
    const got = input.value.trim() === "" ? "nothing" : `“${input.value.trim().slice(0, 20)}”`;
    showError(error, `d_k must be a whole number from ${dk.min} to ${dk.max}; got ${got}. Nothing was measured.`);
    input.setAttribute("aria-invalid", "true");
    return;
  }
  input.removeAttribute("aria-invalid");
  const query = new URLSearchParams({ d_k: input.value, draws: String(param(lab, "draws").default), seed: String(param(lab, "seed").default) });
  root.querySelector("#why-proof-status").textContent = "Measuring…";
  try {
    const result = await api(`/api/labs/proof?${query}`);
    clearError(error);
    const cols = result.table.columns;
    rows = result.table.rows.map((r) => Object.fromEntries(cols.map((c, i) => [c, r[i]])));
    root.querySelector("#why-proof-steps").replaceChildren(...rows.map(stepItem));
    root.querySelector("#why-proof-summary").textContent =
      `${grouped(result.params.draws)} random pairs (q, k) at d_k = ${result.params.d_k}, seed ${result.params.seed}.`;
    root.dataset.dk = String(result.params.d_k);
    reveal(root, 0);
  } catch (err) {
    showError(error, err);
    root.querySelector("#why-proof-status").textContent = "";
  }
}

export async function render(root) {
  const lab = (await api("/api/labs")).find((l) => l.name === "proof");
  const dk = param(lab, "d_k");
  root.replaceChildren(
    el("p", { class: "why-intro", text: "Give q and k independent random entries with mean 0 and variance 1, as at the start of training. The argument below predicts seven numbers about their dot product; the lab draws many pairs and measures each one, with a standard error (SE). Reveal the steps in order." }),
    el("form", { id: "why-proof-form", class: "why-controls", novalidate: true },
      el("label", { for: "why-proof-dk" }, "Key width d", el("sub", { text: "k" }), " ",
        el("input", { id: "why-proof-dk", type: "number", min: dk.min, max: dk.max, step: "1", value: dk.default, required: true, "aria-describedby": "why-proof-error" })),
      el("span", { class: "why-hint", text: `from ${dk.min} to ${dk.max}` }),
      el("button", { type: "submit", id: "why-proof-run" }, "Measure")),
    el("p", { id: "why-proof-summary", class: "why-hint" }),
    el("ol", { id: "why-proof-steps", class: "why-steps" }),
    el("div", { class: "why-controls" },
      el("button", { type: "button", id: "why-proof-next", onclick: () => reveal(root, shown + 1) }, "Next step"),
      el("button", { type: "button", id: "why-proof-again", onclick: () => reveal(root, 0) }, "Hide the steps")),
    el("p", { id: "why-proof-status", role: "status", "aria-live": "polite" }),
    el("p", { id: "why-proof-error", class: "error", role: "alert", hidden: true }),
  );
  root.querySelector("#why-proof-form").addEventListener("submit", (event) => {
    event.preventDefault();
    measure(root, lab);
  });
  await measure(root, lab);
}
