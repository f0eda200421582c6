// Figure sqrt-dk-histogram: score spread and softmax saturation at one width (GET /api/histogram).
import { api, clearError, config, el, fmt, plot, showError } from "./common.js";

const root = document.getElementById("figure-sqrt-dk-histogram");
const $ = (sel) => root.querySelector(sel);
let timer = null;
let latest = 0;

const pct = (x) => `${fmt(100 * x, 1)}%`;

function render(fig) {
  const centres = fig.counts.map((_, b) => (fig.edges[b] + fig.edges[b + 1]) / 2);
  const width = fig.edges[1] - fig.edges[0];
  // The bins cover the same range at every d_k, so the widening shows as the slider moves.
  const range = [fig.edges[0], fig.edges[fig.edges.length - 1]];
  const what = fig.scaled ? "scaled scores q·k/√d_k" : "raw scores q·k";
  plot($("#hist-plot"), [{
    type: "bar",
    x: centres,
    y: fig.counts,
    width,
    marker: { color: "#3b6ea8", line: { color: "#1d3b5c", width: 1 } },
    hovertemplate: "score ≈ %{x:.2f}<br>%{y} draws<extra></extra>",
  }], {
    title: { text: `${fig.draws.toLocaleString("en")} ${what}, d_k = ${fig.d_k}`, font: { size: 14 } },
    xaxis: { title: { text: fig.scaled ? "q·k / √d_k" : "q·k" }, range, zeroline: true },
    yaxis: { title: { text: "draws per bin" } },
    bargap: 0,
  });
  $("#hist-plot").setAttribute("aria-label",
    `Histogram of ${what} at d_k = ${fig.d_k}: centred on 0 with standard deviation ${fmt(fig.std, 2)}.`);
  const spread = $("#hist-spread");
  spread.replaceChildren(
    "Measured spread (standard deviation): ",
    el("strong", { id: "hist-std", "data-value": String(fig.std), text: fmt(fig.std, 2) }),
    `. The proof predicts ${fig.scaled ? "1 at every width" : `√${fig.d_k} = ${fmt(fig.predicted_std, 2)}`}.`,
  );
  const rows = [
    ["without scaling", fig.unscaled_share, fig.gradient_term, !fig.scaled],
    ["with scaling", fig.scaled_share, null, fig.scaled],
  ].map(([label, share, grad, shown]) => el("tr", { class: shown ? "shown" : null },
    el("th", { scope: "row" }, label, shown ? el("span", { class: "badge", text: " ◀ shown" }) : null),
    el("td", { "data-value": String(share), class: "share" }, pct(share),
      el("span", { class: "meter", "aria-hidden": "true" }, el("span", { style: `width:${100 * share}%` }))),
    el("td", { "data-value": grad === null ? "" : String(grad) },
      label === "with scaling" ? "—" : grad === null ? "no trial saturated" : fmt(grad, 4))));
  $("#hist-saturation tbody").replaceChildren(...rows);
  $("#hist-saturation caption").textContent =
    `${fig.trials} softmax trials over ${fig.keys} keys at d_k = ${fig.d_k}: share where one weight tops ${fig.threshold}`;
  $("#hist-summary").textContent = fig.scaled
    ? `Scaled: spread ${fmt(fig.std, 2)}, and ${pct(fig.scaled_share)} of trials saturate.`
    : `Unscaled: spread ${fmt(fig.std, 2)}, and ${pct(fig.unscaled_share)} of trials saturate.`;
}

async function update() {
  const dk = +$("#hist-dk").value;
  const scaled = $("#hist-scaled").checked;
  $("#hist-dk-value").textContent = dk;
  const ticket = ++latest;
  root.setAttribute("aria-busy", "true");
  try {
    const fig = await api(`/api/histogram?d_k=${dk}&scaled=${scaled}`);
    if (ticket !== latest) return; // a newer slider position is on its way
    clearError($("#hist-error"));
    render(fig);
    root.dataset.dk = String(fig.d_k);
    root.dataset.scaled = String(fig.scaled);
  } catch (err) {
    showError($("#hist-error"), err);
  } finally {
    if (ticket === latest) root.removeAttribute("aria-busy");
  }
}

function soon() {
  $("#hist-dk-value").textContent = $("#hist-dk").value;
  clearTimeout(timer);
  timer = setTimeout(update, 80);
}

export async function init() {
  const { histogram: h } = await config();
  const slider = $("#hist-dk");
  Object.assign(slider, { min: h.d_k_min, max: h.d_k_max, step: h.d_k_step, value: h.d_k_default });
  slider.addEventListener("input", soon);
  $("#hist-scaled").addEventListener("change", update);
  await update();
}
