// A small line chart in SVG, drawn without plotly.js (which loads late): the training loss as it
// arrives, and the loss per offset of a repeat. series: [{ name, y: [number|null], dash, cls }].
import { el } from "./common.js";

const NS = "http://www.w3.org/2000/svg";
// The chart's box in SVG units (the node scales it) and its margins for the axes' labels.
const BOX = { width: 320, height: 150 };
const PAD = { left: 34, right: 8, top: 8, bottom: 26 };

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

const nice = (x) => (x >= 10 ? x.toFixed(0) : x >= 1 ? x.toFixed(1) : x.toFixed(2));

// Draw into the <svg> node; xMax: the x axis' end (the steps a run will make, say).
export function drawLines(node, series, { xMax = null, xLabel = "", yLabel = "" } = {}) {
  const { width: W, height: H } = BOX;
  const values = series.flatMap((s) => s.y).filter((v) => v !== null && Number.isFinite(v));
  const top = values.length ? Math.max(...values) * 1.05 || 1 : 1;
  const n = Math.max(xMax ?? 0, ...series.map((s) => s.y.length - 1), 1);
  const x = (i) => PAD.left + ((W - PAD.left - PAD.right) * i) / n;
  const y = (v) => H - PAD.bottom - ((H - PAD.top - PAD.bottom) * v) / top;
  node.setAttribute("viewBox", `0 0 ${W} ${H}`);
  node.replaceChildren(
    svg("line", { x1: PAD.left, y1: y(0), x2: W - PAD.right, y2: y(0), class: "axis" }),
    svg("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: y(0), class: "axis" }),
    svg("text", { x: PAD.left - 3, y: PAD.top + 8, "text-anchor": "end", class: "tick" }, nice(top)),
    svg("text", { x: PAD.left - 3, y: y(0), "text-anchor": "end", class: "tick" }, "0"),
    svg("text", { x: W - PAD.right, y: H - 4, "text-anchor": "end", class: "tick" }, `${xLabel} ${n}`.trim()),
    svg("text", { x: PAD.left + 2, y: H - 4, class: "tick" }, yLabel),
  );
  for (const s of series) {
    let path = "";
    let pen = false;
    s.y.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) { pen = false; return; }
      path += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    node.append(svg("path", { d: path || "M0,0", class: `line ${s.cls || ""}${s.dash ? " dash" : ""}` }));
  }
}

// The chart's key: one swatch and name per series.
export function legend(series) {
  return el("ul", { class: "chart-key" }, series.map((s) => el("li", {},
    el("span", { class: `swatch ${s.cls || ""}${s.dash ? " dash" : ""}`, "aria-hidden": "true" }), s.name)));
}
