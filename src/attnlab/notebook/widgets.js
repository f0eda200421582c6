// attnlab's notebook widgets (anywidget, no build step): the kernel computes each view and checks
// every value; this module draws the view, keeps each control in step with its trait (a value
// set from a cell moves the control too) and sends the controls' changes back. One renderer
// for every figure's "view". Values typed out of range are refused here, with a message in the
// error line; values the kernel refuses come back with the kernel's reason in the same line.
function make(tag, props = {}) {
  return Object.assign(document.createElement(tag), props);
}

function table(t) {
  const el = make("table", { className: "attnlab-table" });
  el.createCaption().textContent = t.label;
  const head = el.createTHead().insertRow();
  head.appendChild(make("th"));
  for (const c of t.cols) head.appendChild(make("th", { textContent: c }));
  const body = el.createTBody();
  t.rows.forEach((r, i) => {
    const tr = body.insertRow();
    tr.appendChild(make("th", { textContent: r }));
    // The kernel writes each number (attnlab.core.numbers.format_number): one rule everywhere.
    for (const text of t.text[i]) tr.insertCell().textContent = text;
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
  svg.style.maxWidth = "480px";
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

// Each control returns [element, sync]: sync() sets the element from the model's trait.
function checkbox(model, c) {
  const input = make("input", { type: "checkbox", name: c.name });
  input.addEventListener("change", () => { model.set(c.name, input.checked); model.save_changes(); });
  const label = make("label", { textContent: c.label + " " });
  label.appendChild(input);
  return [label, () => { input.checked = Boolean(model.get(c.name)); }];
}

function choice(model, c) {
  const select = make("select", { name: c.name });
  for (const [value, text] of c.options) select.appendChild(make("option", { value: String(value), textContent: text }));
  select.addEventListener("change", () => { model.set(c.name, Number(select.value)); model.save_changes(); });
  const label = make("label", { textContent: c.label + " " });
  label.appendChild(select);
  return [label, () => { select.value = String(model.get(c.name)); }];
}

function number(model, c, say) {
  const by = c.step || 1;
  const input = make("input", { type: "number", name: c.name, min: c.min, max: c.max, step: by });
  const prev = make("button", { type: "button", textContent: "◀ previous", className: "attnlab-prev" });
  const next = make("button", { type: "button", textContent: "next ▶", className: "attnlab-next" });
  prev.setAttribute("aria-label", `previous ${c.label}`);
  next.setAttribute("aria-label", `next ${c.label}`);
  const send = (v) => { say(""); model.set(c.name, v); model.save_changes(); };
  const commit = () => {
    const typed = input.value.trim(), v = Number(typed);
    if (typed === String(model.get(c.name))) return;  // Enter, then the blur that follows
    if (typed === "" || !Number.isInteger(v) || v < c.min || v > c.max) {
      say(`${c.label} must be a whole number from ${c.min} to ${c.max}; ` +
          `${typed === "" ? "that entry" : `"${typed}"`} was not used, so ${c.label} stays ${model.get(c.name)}.`);
      input.value = String(model.get(c.name));
      return;
    }
    send(v);
  };
  input.addEventListener("change", commit);
  // Enter commits here: a notebook's own Enter shortcut would otherwise take the key first.
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); event.stopPropagation(); commit(); }
  });
  prev.addEventListener("click", () => send(Math.max(c.min, model.get(c.name) - by)));
  next.addEventListener("click", () => send(Math.min(c.max, model.get(c.name) + by)));
  const label = make("label", { textContent: c.label + " " });
  label.appendChild(input);
  const group = make("span", { className: "attnlab-number" });
  group.append(prev, label, next);
  const sync = () => {
    const v = model.get(c.name);
    input.value = String(v);
    prev.disabled = v <= c.min;
    next.disabled = v >= c.max;
  };
  return [group, sync];
}

function render({ model, el }) {
  const box = make("div", { className: "attnlab-widget" });
  box.dataset.lmSuppressShortcuts = "true";  // keys typed in a control are not notebook commands
  const bar = make("div", { className: "attnlab-controls" });
  bar.style.cssText = "display:flex;flex-wrap:wrap;gap:0.5em 1.5em;align-items:center";
  const error = make("p", { className: "attnlab-error" });
  error.setAttribute("role", "alert");
  error.style.cssText = "color:#b00020;font-weight:bold;margin:0.4em 0";
  const figure = make("div", { className: "attnlab-view" });
  box.append(bar, error, figure);
  el.replaceChildren(box);

  const say = (text) => { error.textContent = text; error.hidden = !text; };
  const listening = [];
  const listen = (name, fn, into = listening) => { model.on(`change:${name}`, fn); into.push([name, fn]); };
  const forget = (from) => { for (const [name, fn] of from.splice(0)) model.off(`change:${name}`, fn); };
  const following = [];
  const controls = () => {
    forget(following);
    bar.replaceChildren();
    for (const c of model.get("controls")) {
      const kind = { bool: checkbox, choice: choice, int: number }[c.type];
      const [node, sync] = kind(model, c, say);
      bar.appendChild(node);
      // A value set from a cell, or sent back by the kernel after a refusal, moves the control.
      listen(c.name, sync, following);
      sync();
    }
  };
  const draw = () => {
    const view = model.get("view");
    const parts = [make("h4", { textContent: view.title })];
    if (view.formula) parts.push(make("code", { textContent: view.formula }));
    if (view.explain) parts.push(make("p", { textContent: view.explain }));
    for (const line of view.lines || []) parts.push(make("p", { textContent: line }));
    if (view.histogram) parts.push(bars(view.histogram));
    for (const t of view.tables || []) parts.push(table(t));
    for (const n of view.notes || []) parts.push(make("p", { textContent: n }));
    figure.replaceChildren(...parts);
    say(model.get("error"));  // a new view follows an accepted change: an old local refusal goes
  };
  listen("view", draw);
  listen("error", () => say(model.get("error")));
  listen("controls", controls);
  controls();
  draw();
  return () => { forget(following); forget(listening); };
}

export default { render };
