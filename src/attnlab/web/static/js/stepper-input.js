// The stepper's inputs: Q, K and V typed in the text boxes or in the table cells, each number
// checked here before the server checks it again (and names an entry the same way, 1-based).
import { parseNumber } from "./common.js";

export const toText = (m) => m.map((row) => row.join(" ")).join("\n");

// "Q row 2, column 1: expected ..." -- the page counts rows and columns from 1, as the server does.
export function checkEntry(name, i, j, text, maxAbs) {
  const where = `${name} row ${i + 1}, column ${j + 1}`;
  const x = parseNumber(text);
  if (x === null) throw new Error(`${where}: expected a number such as 0.5 or −2, but got “${text}”`);
  if (Math.abs(x) > maxAbs) throw new Error(`${where}: expected a number within ±${maxAbs}, but got ${x}`);
  return x;
}

export function parseMatrix(name, text, cfg) {
  const rows = text.trim().split(/\n+/).map((line) => line.trim().split(/[\s,;]+/).filter(Boolean));
  if (!rows.length || !rows[0].length) throw new Error(`${name}: expected at least one row of numbers`);
  const { max_tokens: tokens, max_width: width, max_abs: maxAbs } = cfg;
  if (rows.length > tokens) throw new Error(`${name}: expected at most ${tokens} rows (tokens), but got ${rows.length}`);
  return rows.map((row, i) => {
    if (row.length > width) throw new Error(`${name}: expected at most ${width} numbers a row, but row ${i + 1} has ${row.length}`);
    return row.map((cell, j) => checkEntry(name, i, j, cell, maxAbs));
  });
}

// Turn the cells of an input table (Q, K or V) into text inputs; onEdit(i, j, text, input).
export function makeEditable(table, name, onEdit) {
  table.querySelectorAll("td[data-col]").forEach((td) => {
    const i = +td.dataset.row;
    const j = +td.dataset.col;
    const input = document.createElement("input");
    Object.assign(input, { type: "text", value: td.dataset.value, inputMode: "decimal", className: "cell-input", size: 5 });
    input.setAttribute("aria-label", `${name} row ${i + 1}, column ${j + 1}`);
    input.dataset.entry = `${name} row ${i + 1}, column ${j + 1}`;
    input.addEventListener("change", () => onEdit(i, j, input.value, input));
    td.textContent = "";
    td.append(input);
  });
}
