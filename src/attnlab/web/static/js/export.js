// Each figure's tool row: copy a link to its state, present it, and export it. Tables are written
// here from the numbers the server sent (CSV, JSON, Markdown, LaTeX); images are one SVG holding
// a caption that states the figure's state, the Plotly chart (Plotly.toImage) and the tables, and
// the PNG is that SVG drawn on a canvas. Nothing leaves the machine: downloads are blob: URLs.
import { MASKED, chartsDrawn, el, fmt, isMasked, loadPlotly } from "./common.js";
import { togglePresentation } from "./present.js";
import { linkTo } from "./state.js";

// CSV keeps every digit of a number, as the lab CSV (LabResult.to_csv) does: a blocked pair is
// -inf (which every CSV reader takes for minus infinity) and an empty cell stays empty, so the
// two never read alike.
const cellText = (x) => (typeof x === "number" ? String(x) : isMasked(x) ? MASKED : "");

export function toCsv({ caption, tables }) {
  const quote = (s) => (/[",\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s);
  const lines = [`# ${caption}`];
  for (const t of tables) {
    lines.push("", `# ${t.title}`, ["", ...t.cols].map(quote).join(","));
    t.values.forEach((row, i) => lines.push([t.rows[i], ...row.map(cellText)].map(quote).join(",")));
  }
  return `${lines.join("\n")}\n`;
}

export const toJson = ({ caption, state, tables }) =>
  `${JSON.stringify({ caption, state, tables: tables.map(({ title, rows, cols, values }) => ({ title, rows, cols, values })) }, null, 2)}\n`;

export function toMarkdown({ caption, tables }) {
  const out = [`*${caption}*`];
  for (const t of tables) {
    out.push("", `**${t.title}**`, "", `| | ${t.cols.join(" | ")} |`, `|---|${t.cols.map(() => "---:").join("|")}|`);
    t.values.forEach((row, i) => out.push(`| ${t.rows[i]} | ${row.map((x) => fmt(x)).join(" | ")} |`));
  }
  return `${out.join("\n")}\n`;
}

// LaTeX that compiles with a plain pdflatex (no unicode package): TeX's special characters
// escaped, and every symbol the page writes in unicode (the minus, √, ·, ×, ᵀ, ᴼ, quotes) mapped to
// the macro that draws it; anything else outside ASCII would stop pdflatex, so it is spelled out.
const TEX = {
  "\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", $: "\\$", "#": "\\#", _: "\\_", "{": "\\{", "}": "\\}",
  "~": "\\textasciitilde{}", "^": "\\textasciicircum{}", "<": "\\ensuremath{<}", ">": "\\ensuremath{>}", "|": "\\ensuremath{|}",
  "−": "\\ensuremath{-}", "∞": "\\ensuremath{\\infty}", "√": "\\ensuremath{\\surd}", "·": "\\ensuremath{\\cdot}",
  "×": "\\ensuremath{\\times}", "÷": "\\ensuremath{\\div}", "ᵀ": "\\ensuremath{^{\\top}}", "⊤": "\\ensuremath{^{\\top}}",
  "ᴼ": "\\ensuremath{^{O}}", "≈": "\\ensuremath{\\approx}", "≤": "\\ensuremath{\\le}", "≥": "\\ensuremath{\\ge}",
  "±": "\\ensuremath{\\pm}", "→": "\\ensuremath{\\to}", "∑": "\\ensuremath{\\sum}", "α": "\\ensuremath{\\alpha}",
  "“": "``", "”": "''", "‘": "`", "’": "'", "–": "--", "—": "---", "…": "\\ldots{}", "▸": "", "★": "*",
};
export const tex = (s) => String(s).replace(/[\\&%$#_{}~^<>|]|[^\x20-\x7e]/gu, (c) =>
  TEX[c] ?? (/\p{L}/u.test(c) ? c.normalize("NFKD").replace(/[^\x20-\x7e]/g, "") || "?" : "?"));
// A table entry: a number in math mode (so its minus is a minus), 9e-4 as 9 × 10⁻⁴ (TeX would
// typeset "9e - 4"), -inf for a blocked pair, a dash where there is no value.
export function texNumber(x) {
  const text = fmt(x);
  if (text === "-inf") return "$-\\infty$";
  if (text === "—") return "---";
  const power = /^(-?[\d.]+)e([+-]?)0*(\d+)$/.exec(text);
  if (power) return `$${power[1]}\\times10^{${power[2] === "-" ? "-" : ""}${power[3]}}$`;
  return `$${text}$`;
}

// The column widths TeX will give a table, in points at \small (about 4.6 pt a digit, 10 pt of
// column gap): enough to cut a wide table into parts that fit the text width.
const texWidth = (text) => 4.6 * String(text).length + 10;

function columnParts(t) {
  const LINE = 390; // \textwidth with the 2.5 cm margins below, in pt
  const label = Math.max(...t.rows.map((r) => texWidth(tex(r))));
  const widths = t.cols.map((c, j) => Math.max(texWidth(c), ...t.values.map((row) => texWidth(fmt(row[j])) - 2)));
  const parts = [];
  let start = 0;
  let used = label;
  widths.forEach((w, j) => {
    if (j > start && used + w > LINE) {
      parts.push([start, j]);
      start = j;
      used = label;
    }
    used += w;
  });
  parts.push([start, t.cols.length]);
  return parts;
}

// A whole document, so the file compiles as it is; the tables between \begin{document} and
// \end{document} paste into any other. A table wider than the page is cut into column parts
// ("columns 1-12 of 33"), each inside a box that shrinks it only if it still runs over, so no
// column is lost off the page's edge.
export function toLatex({ caption, tables }) {
  const out = ["\\documentclass{article}", "\\usepackage[T1]{fontenc}", "\\usepackage[margin=2.5cm]{geometry}",
    "\\usepackage{graphicx}", "\\begin{document}", `% ${tex(caption)}`];
  for (const t of tables) {
    const parts = columnParts(t);
    parts.forEach(([a, b], n) => {
      const which = parts.length > 1 ? ` (columns ${a + 1}--${b} of ${t.cols.length})` : "";
      out.push("\\begin{table}[h]", "\\centering", "\\small",
        `\\caption{${tex(t.title)}${which}. ${n ? "" : tex(caption)}}`,
        "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%",
        `\\begin{tabular}{l${"r".repeat(b - a)}}`, "\\hline",
        ` & ${t.cols.slice(a, b).map(tex).join(" & ")} \\\\`, "\\hline");
      t.values.forEach((row, i) => out.push(`${tex(t.rows[i])} & ${row.slice(a, b).map(texNumber).join(" & ")} \\\\`));
      out.push("\\hline", "\\end{tabular}}", "\\end{table}", "");
    });
  }
  out.push("\\end{document}");
  return `${out.join("\n")}\n`;
}

// -- images ------------------------------------------------------------------------------------
const esc = (s) => String(s).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);

// Columns as wide as their widest text (a header or a number), measured at the image's 13 px type,
// so no two headers run into each other.
function textWidth(text, bold = false) {
  textWidth.ctx ??= document.createElement("canvas").getContext("2d");
  textWidth.ctx.font = `${bold ? "bold " : ""}13px "DejaVu Sans", sans-serif`;
  return Math.ceil(textWidth.ctx.measureText(String(text)).width);
}

function tableSvg(t, y0) {
  const rh = 24;
  const gap = 14; // between a column's widest text and the next column
  const base = rh - 8; // text baseline within a row
  const lw = Math.max(40, ...t.rows.map((r) => textWidth(r))) + gap;
  const widths = t.cols.map((c, j) => gap + Math.max(textWidth(c), ...t.values.map((row) => textWidth(fmt(row[j])))));
  const rights = widths.map((_, j) => 10 + lw + widths.slice(0, j + 1).reduce((a, b) => a + b, 0) - 6);
  const full = 10 + lw + widths.reduce((a, b) => a + b, 0);
  const parts = [`<text x="10" y="${y0 + base}" font-weight="bold">${esc(t.title)}</text>`];
  let y = y0 + 24;
  t.cols.forEach((c, j) => parts.push(`<text x="${rights[j]}" y="${y + base}" text-anchor="end" fill="#555">${esc(c)}</text>`));
  t.values.forEach((row, i) => {
    y += rh;
    parts.push(`<line x1="10" x2="${full}" y1="${y}" y2="${y}" stroke="#ccc"/>`);
    parts.push(`<text x="10" y="${y + base}" fill="#555">${esc(t.rows[i])}</text>`);
    row.forEach((x, j) => parts.push(`<text x="${rights[j]}" y="${y + base}" text-anchor="end">${esc(fmt(x))}</text>`));
  });
  return { svg: parts.join(""), height: y + rh + base - y0, width: Math.max(full, 20 + textWidth(t.title, true)) + 10 };
}

// Heatmaps (data.heatmaps: [{ title, values }], weights in 0..1) as squares of rects, darker =
// more weight, the same shading as the page's canvases: four to a row, each with its title.
function heatmapsSvg(maps, y0) {
  const SQUARE = 180; // each head's square, in px of the exported image
  const parts = [];
  const across = Math.min(4, maps.length);
  maps.forEach((m, n) => {
    const x = 10 + (n % across) * (SQUARE + 20);
    const y = y0 + Math.floor(n / across) * (SQUARE + 40);
    const size = SQUARE / m.values.length;
    const cells = m.values.flatMap((row, i) => row.map((w, j) => {
      const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, w ?? 0))));
      return `<rect x="${(x + j * size).toFixed(2)}" y="${(y + 20 + i * size).toFixed(2)}" width="${size.toFixed(2)}" height="${size.toFixed(2)}" fill="rgb(${shade},${shade},${255 - Math.round((255 - shade) * 0.2)})"/>`;
    }));
    parts.push(`<g class="heatmap"><text x="${x}" y="${y + 14}" font-size="12">${esc(m.title)}</text>${cells.join("")}`
      + `<rect x="${x}" y="${y + 20}" width="${SQUARE}" height="${SQUARE}" fill="none" stroke="#999"/></g>`);
  });
  const rows = Math.ceil(maps.length / across);
  return { svg: parts.join(""), height: rows * (SQUARE + 40), width: 20 + across * (SQUARE + 20) };
}

// The image is as wide as what it holds (the caption wraps to that width, at least 480 px).
// figureOnly: the chart alone (or, for a figure with no chart, its tables), with no caption.
export async function toSvg(data, plots = [], { figureOnly = false } = {}) {
  const parts = [];
  let y = 10;
  const charts = plots.filter((node) => window.Plotly && node.querySelector(".main-svg"));
  const maps = data.heatmaps ?? [];
  // A table with image: false (a heatmap's own numbers) goes to CSV and LaTeX, not the picture.
  const tables = figureOnly && (charts.length || maps.length) ? [] : data.tables.filter((t) => t.image !== false);
  let width = 480;
  if (maps.length) width = Math.max(width, heatmapsSvg(maps, 0).width);
  charts.forEach((node) => { width = Math.max(width, Math.max(node.clientWidth, 400)); });
  for (const t of tables) width = Math.max(width, tableSvg(t, 0).width);
  if (!figureOnly) {
    const perLine = Math.max(40, Math.floor((width - 20) / 8.2)); // 15 px type, about 8 px a character
    const lines = data.caption.match(new RegExp(`.{1,${perLine}}(\\s|$)`, "g")) || [data.caption];
    lines.forEach((line) => { y += 20; parts.push(`<text x="10" y="${y}" font-size="15">${esc(line.trim())}</text>`); });
    y += 12;
  }
  for (const node of charts) {
    const w = Math.max(node.clientWidth, 400);
    const h = Math.max(node.clientHeight, 300);
    const url = await window.Plotly.toImage(node, { format: "svg", width: w, height: h });
    parts.push(`<image x="0" y="${y}" width="${w}" height="${h}" href="${esc(url)}"/>`);
    y += h + 10;
    width = Math.max(width, w);
  }
  if (maps.length) {
    const drawn = heatmapsSvg(maps, y);
    parts.push(drawn.svg);
    y += drawn.height;
  }
  for (const t of tables) {
    const drawn = tableSvg(t, y);
    parts.push(drawn.svg);
    y += drawn.height;
  }
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y + 10}" font-family="DejaVu Sans, sans-serif" font-size="13">`
    + `<rect width="100%" height="100%" fill="#fff"/>${parts.join("")}</svg>`;
}

export async function toPng(svg) {
  const image = new Image();
  image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
  await image.decode();
  const canvas = el("canvas", { width: image.width * 2, height: image.height * 2 });
  const ctx = canvas.getContext("2d");
  ctx.scale(2, 2);
  ctx.drawImage(image, 0, 0);
  return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
}

function download(name, content, type) {
  const blob = content instanceof Blob ? content : new Blob([content], { type });
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

const FORMATS = {
  csv: ["CSV", (d) => toCsv(d), "text/csv"],
  json: ["JSON", (d) => toJson(d), "application/json"],
  md: ["Markdown", (d) => toMarkdown(d), "text/markdown"],
  tex: ["LaTeX", (d) => toLatex(d), "application/x-tex"],
};

// data() -> { caption, state, tables: [{ title, rows, cols, values }] }; plots() -> nodes.
export function figureTools(root, { name, data, plots = () => [] }) {
  const status = el("span", { class: "tool-status", role: "status" });
  const linkBox = el("input", { type: "text", readonly: true, class: "link-box", "aria-label": "Link to this figure", hidden: true });
  const copy = el("button", { type: "button", class: "copy-link", onclick: async () => {
    const link = linkTo(root.id);
    copy.dataset.link = link;
    try {
      await navigator.clipboard.writeText(link);
      status.textContent = "Link copied.";
    } catch {
      linkBox.hidden = false; // no clipboard permission: show the link, selected, to copy by hand
      linkBox.value = link;
      linkBox.select();
      status.textContent = "Copy the selected link.";
    }
  } }, "Copy link");
  const present = el("button", { type: "button", class: "present-button", "aria-pressed": "false", onclick: () => togglePresentation(root) }, "Present");
  const only = el("input", { type: "checkbox", class: "figure-only" });
  const image = (format) => el("button", { type: "button", "data-export": format, onclick: async () => {
    // The picture needs the chart: drawn by now, unless the export came before plotly.js did.
    if (plots().length) await loadPlotly().then(chartsDrawn);
    const svg = await toSvg(data(), plots(), { figureOnly: only.checked });
    if (format === "svg") download(`${name}.svg`, svg, "image/svg+xml");
    else download(`${name}.png`, await toPng(svg), "image/png");
  } }, format.toUpperCase());
  const tables = Object.entries(FORMATS).map(([ext, [label, make, type]]) =>
    el("button", { type: "button", "data-export": ext, onclick: () => download(`${name}.${ext}`, make(data()), type) }, label));
  const bar = el("div", { class: "figure-tools", role: "group", "aria-label": "Link, present and export" },
    copy, present, el("span", { class: "tools-label", text: "Export:" }), image("png"), image("svg"),
    el("label", { class: "figure-only-label" }, only, " figure only"), ...tables, status, linkBox);
  // After the figure, before its folded text: the figure's own controls come first by Tab.
  const folded = root.querySelector(":scope > details");
  if (folded) folded.before(bar);
  else root.append(bar);
  root.exportData = data; // for the tests and the console: the figure's numbers as exported
  return bar;
}
