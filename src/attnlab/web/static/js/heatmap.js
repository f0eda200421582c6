// A table too wide to read from the back of a room (more than WIDE columns) becomes a heatmap in
// Present mode: each cell shaded by its value on the table's own scale (blue below 0, orange
// above, white at 0; −∞ grey), its number kept as the cell's title and for screen readers, the
// row and column headers (the tokens) kept as the axes' labels.
export const WIDE = 8;

function shade(x, top) {
  const t = Math.min(1, Math.abs(x) / (top || 1)); // 0 .. 1 of the table's largest magnitude
  const [r, g, b] = x < 0 ? [31, 95, 191] : [194, 65, 12];
  const mix = (c) => Math.round(255 - t * (255 - c));
  return `rgb(${mix(r)}, ${mix(g)}, ${mix(b)})`;
}

// Shade every table of `node` wider than WIDE columns; on = false takes the shading off.
export function heatTables(node, on) {
  node.querySelectorAll("table.matrix").forEach((table) => {
    const cells = [...table.querySelectorAll("td[data-col]")];
    const cols = table.tHead?.rows[0]?.cells.length - 1;
    const wide = on && cols > WIDE;
    table.classList.toggle("heatmap", wide);
    const numbers = cells.filter((td) => td.dataset.value !== "").map((td) => Number(td.dataset.value)).filter(Number.isFinite);
    const top = Math.max(0, ...numbers.map(Math.abs));
    for (const td of cells) {
      const x = Number(td.dataset.value);
      td.style.background = wide ? (Number.isFinite(x) && td.dataset.value !== "" ? shade(x, top) : "#c8ccd2") : "";
    }
    if (wide) table.setAttribute("aria-description", "shown as a heatmap: each cell's number is its title");
    else table.removeAttribute("aria-description");
  });
}
