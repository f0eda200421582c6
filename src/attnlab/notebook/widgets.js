// attnlab's notebook widgets (anywidget, no build step): the kernel computes each view; this
// module draws it and sends the controls back. One renderer for every figure's "view".
function cell(x) {
  if (x === null) return "−∞";
  return Math.abs(x) >= 1e-3 || x === 0 ? String(Number(x.toPrecision(4))) : x.toExponential(2);
}

function table(t) {
  const el = document.createElement("table");
  el.className = "attnlab-table";
  const cap = el.createCaption();
  cap.textContent = t.label;
  const head = el.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  for (const c of t.cols) head.appendChild(Object.assign(document.createElement("th"), { textContent: c }));
  const body = el.createTBody();
  t.rows.forEach((r, i) => {
    const tr = body.insertRow();
    tr.appendChild(Object.assign(document.createElement("th"), { textContent: r }));
    for (const x of t.values[i]) tr.insertCell().textContent = cell(x);
  });
  return el;
}

function bars(hist) {
  // The histogram as SVG bars: counts over bin edges, no plotting library needed.
  const w = 360, h = 120, n = hist.counts.length, top = Math.max(1, ...hist.counts);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", hist.label);
  hist.counts.forEach((c, i) => {
    const r = document.createElementNS(ns, "rect");
    const bh = (c / top) * (h - 4);
    r.setAttribute("x", String((i * w) / n));
    r.setAttribute("y", String(h - bh));
    r.setAttribute("width", String(Math.max(1, w / n - 1)));
    r.setAttribute("height", String(bh));
    r.setAttribute("fill", "#4c72b0");
    svg.appendChild(r);
  });
  return svg;
}

function control(model, c) {
  const label = document.createElement("label");
  label.textContent = c.label + " ";
  let input;
  if (c.type === "bool") {
    input = Object.assign(document.createElement("input"), { type: "checkbox", checked: model.get(c.name) });
    input.addEventListener("change", () => { model.set(c.name, input.checked); model.save_changes(); });
  } else {
    input = Object.assign(document.createElement("input"), {
      type: "number", min: c.min, max: c.max, step: c.step || 1, value: model.get(c.name),
    });
    input.addEventListener("change", () => {
      const v = Math.round(Number(input.value));
      if (Number.isFinite(v) && v >= c.min && v <= c.max) { model.set(c.name, v); model.save_changes(); }
    });
  }
  label.appendChild(input);
  return label;
}

function render({ model, el }) {
  const draw = () => {
    const view = model.get("view");
    const box = document.createElement("div");
    box.className = "attnlab-widget";
    const bar = document.createElement("div");
    bar.className = "attnlab-controls";
    for (const c of model.get("controls")) bar.appendChild(control(model, c));
    box.appendChild(bar);
    box.appendChild(Object.assign(document.createElement("h4"), { textContent: view.title }));
    if (view.formula) box.appendChild(Object.assign(document.createElement("code"), { textContent: view.formula }));
    if (view.explain) box.appendChild(Object.assign(document.createElement("p"), { textContent: view.explain }));
    for (const line of view.lines || []) box.appendChild(Object.assign(document.createElement("p"), { textContent: line }));
    if (view.histogram) box.appendChild(bars(view.histogram));
    for (const t of view.tables || []) box.appendChild(table(t));
    for (const n of view.notes || []) box.appendChild(Object.assign(document.createElement("p"), { textContent: n }));
    el.replaceChildren(box);
  };
  model.on("change:view", draw);
  draw();
}

export default { render };
