// A table too wide to read from the back of a room (more than `wide` columns, GET /api/config's
// stepper.heatmap_columns) becomes a heatmap in
// Present mode: each cell shaded by its value on the table's own scale (blue below 0, orange
// above, white at 0; −∞ grey), its number kept as the cell's title and for screen readers, the
// row and column headers (the tokens) kept as the axes' labels.
const COLD = "#1f5fbf"; // below 0, the page's blue
const WARM = "#c2410c"; // above 0, the page's orange

function shade(x, top) {
  const share = Math.min(1, Math.abs(x) / (top || 1)); // of the table's largest magnitude
  return `color-mix(in srgb, ${x < 0 ? COLD : WARM} ${Math.round(share * 100)}%, white)`;
}

// Shade every table of `node` wider than `wide` columns; on = false takes the shading off.
export function heatTables(node, on, wide) {
  node.querySelectorAll("table.matrix").forEach((table) => {
    const cells = [...table.querySelectorAll("td[data-col]")];
    const cols = table.tHead?.rows[0]?.cells.length - 1;
    const heat = on && cols > wide;
    table.classList.toggle("heatmap", heat);
    const numbers = cells.filter((td) => td.dataset.value !== "").map((td) => Number(td.dataset.value)).filter(Number.isFinite);
    const top = Math.max(0, ...numbers.map(Math.abs));
    for (const td of cells) {
      const x = Number(td.dataset.value);
      td.style.background = heat ? (Number.isFinite(x) && td.dataset.value !== "" ? shade(x, top) : "#c8ccd2") : "";
    }
    if (heat) table.setAttribute("aria-description", "shown as a heatmap: each cell's number is its title");
    else table.removeAttribute("aria-description");
  });
}
