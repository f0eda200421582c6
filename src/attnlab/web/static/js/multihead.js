// Figure multi-head: four hand-set heads on one sentence (GET /api/multihead?query=i).
import { api, clearError, el, fmt, matrixTable, plot, showError } from "./common.js";

const root = document.getElementById("figure-multi-head");
const $ = (sel) => root.querySelector(sel);
let current = null;

function headCards(fig) {
  const p = fig.picked;
  return fig.heads.map((head, h) => {
    const weights = p.weights[h];
    const top = p.top[h];
    const bars = fig.tokens.map((word, j) => el("li", { class: j === top ? "top" : null, "data-key": j, "data-value": String(weights[j]) },
      el("span", { class: "word", text: word }),
      el("span", { class: "bar", "aria-hidden": "true" }, el("span", { style: `width:${100 * weights[j]}%` })),
      el("span", { class: "num", text: fmt(weights[j]) }),
      el("span", { class: "star" }, j === top ? el("span", { title: "largest weight", text: "★" }) : null,
        j === top ? el("span", { class: "sr-only", text: " largest" }) : null)));
    return el("article", { class: "head", "data-head": h },
      el("h4", {}, `Head ${h + 1}: ${head.name}`),
      el("p", { class: "describes", text: head.describes }),
      el("p", { class: "top-line" }, `“${p.word}” puts its largest weight on `,
        el("strong", { class: "top-word", text: `“${fig.tokens[top]}”` }), ` (${fmt(p.top_weight[h])}).`),
      el("ol", { class: "weights", "aria-label": `Head ${h + 1} weights of “${p.word}” over the sentence` }, bars));
  });
}

function tensorPlot(fig) {
  const n = fig.tokens.length;
  const ticks = { tickvals: [...Array(n).keys()], ticktext: fig.tokens, tickfont: { size: 10 } };
  const data = fig.heads.map((head, h) => ({
    type: "heatmap",
    z: head.weights,
    x: [...Array(n).keys()],
    y: [...Array(n).keys()],
    zmin: 0,
    zmax: 1,
    colorscale: [[0, "#f7fbff"], [0.5, "#6aaed6"], [1, "#08306b"]], // light = little, dark = much
    showscale: h === 0,
    colorbar: { title: { text: "weight" }, len: 0.9 },
    xaxis: h ? `x${h + 1}` : "x",
    yaxis: h ? `y${h + 1}` : "y",
    customdata: head.weights.map((row, i) => row.map((_, j) => [fig.tokens[i], fig.tokens[j]])),
    hovertemplate: `head ${h + 1}<br>%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>`,
  }));
  const layout = {
    grid: { rows: 2, columns: 2, pattern: "independent", xgap: 0.2, ygap: 0.3 },
    height: 620,
    margin: { t: 40, r: 10, b: 70, l: 70 },
    shapes: [],
    annotations: [],
  };
  fig.heads.forEach((head, h) => {
    const sx = h ? `${h + 1}` : "";
    layout[`xaxis${sx}`] = { ...ticks, tickangle: -45 };
    layout[`yaxis${sx}`] = { ...ticks, autorange: "reversed" };
    layout.shapes.push({
      type: "rect", xref: `x${sx}`, yref: `y${sx}`, x0: -0.5, x1: n - 0.5,
      y0: fig.picked.query - 0.5, y1: fig.picked.query + 0.5,
      line: { color: "#d9480f", width: 2, dash: "dot" },
    });
    layout.annotations.push({
      text: `layer ${h}: ${head.name}`, xref: `x${sx} domain`, yref: `y${sx} domain`,
      x: 0.5, y: 1.08, showarrow: false, font: { size: 12 },
    });
  });
  plot($("#mh-tensor"), data, layout);
  $("#mh-tensor").setAttribute("aria-label",
    `Four heatmaps, one per head, forming a tensor of shape (${fig.shape.join(", ")}); the row of “${fig.picked.word}” is outlined with a dotted line.`);
}

function mixing(fig) {
  const p = fig.picked;
  const dv = p.head_outputs[0].length;
  const joinedCols = fig.heads.flatMap((_, h) => [...Array(dv).keys()].map((c) => `h${h + 1}·${c + 1}`));
  const dModel = p.mixed.length;
  const outCols = [...Array(dModel).keys()].map((c) => `out ${c + 1}`);
  $("#mh-mix").replaceChildren(
    matrixTable({ caption: `1. Each head's output for “${p.word}” (its weights times its values)`, rows: fig.heads.map((_, h) => `head ${h + 1}`), cols: [...Array(dv).keys()].map((c) => `feature ${c + 1}`), values: p.head_outputs }),
    matrixTable({ caption: "2. Joined side by side: [head 1; head 2; head 3; head 4]", rows: ["joined"], cols: joinedCols, values: [p.joined] }),
    matrixTable({ caption: `3. Wᴼ, ${joinedCols.length} × ${dModel}: every column reads all heads`, rows: joinedCols, cols: outCols, values: fig.w_o }),
    matrixTable({ caption: "4. Mixed output = joined · Wᴼ", rows: ["output"], cols: outCols, values: [p.mixed] }),
  );
}

function render(fig) {
  $("#mh-heads").replaceChildren(...headCards(fig));
  tensorPlot(fig);
  mixing(fig);
  $("#mh-shape").textContent = `(${fig.shape.join(", ")})`;
  root.dataset.query = String(fig.picked.query);
}

async function pick(query) {
  try {
    current = await api(`/api/multihead?query=${query}`);
    clearError($("#mh-error"));
    render(current);
  } catch (err) {
    showError($("#mh-error"), err);
  }
}

export async function init() {
  const fig = await api("/api/multihead");
  const group = $("#mh-words");
  group.replaceChildren(el("legend", { text: "Query word" }), ...fig.tokens.map((word, i) => el("label", { class: "chip" },
    el("input", { type: "radio", name: "mh-query", value: i, checked: i === fig.picked.query, onchange: () => pick(i) }),
    el("span", { text: word }))));
  current = fig;
  render(fig);
}
