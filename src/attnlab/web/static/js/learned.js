// The learned heads: fetch /api/learned and draw each head's weights on a canvas.
// Every number (weights, predictions, labels, scores) comes from the server.

const $ = (id) => document.getElementById(id);

function drawHead(canvas, weights) {
  const n = weights.length;
  canvas.width = n;
  canvas.height = n;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(n, n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const shade = Math.round(255 * (1 - Math.min(1, weights[i][j])));
      const at = 4 * (i * n + j);
      img.data.set([shade, shade, 255 - Math.round((255 - shade) * 0.2), 255], at);
    }
  }
  ctx.putImageData(img, 0, 0);
}

function sequence(data) {
  const n = data.tokens.length;
  const start = data.repeat ? n - data.repeat : n;
  const parts = data.tokens.map((t, i) => {
    const next = i + 1 < n ? data.tokens[i + 1] : null;
    const hit = next !== null && data.predictions[i] === next;
    const cls = [i >= start ? "copy" : "", hit && i >= start ? "hit" : ""].join(" ").trim();
    return `<span class="${cls}" title="predicts ${data.predictions[i]}">${t}</span>`;
  });
  const note = data.repeat ? ` (the last ${data.repeat} tokens repeat the ${data.repeat} before them; ` +
    "green: the next token predicted right)" : "";
  $("learned-seq").innerHTML = `Tokens: ${parts.join(" ")}${note}`;
}

function layers(data) {
  const root = $("learned-layers");
  root.replaceChildren();
  data.weights.forEach((layer, l) => {
    const h3 = document.createElement("h2");
    h3.textContent = `Layer ${l}`;
    const grid = document.createElement("div");
    grid.className = "learned-layer";
    layer.forEach((w, h) => {
      const info = data.heads.find((x) => x.layer === l && x.head === h);
      const fig = document.createElement("figure");
      fig.className = "learned-head";
      fig.dataset.pattern = info.pattern;
      const canvas = document.createElement("canvas");
      canvas.setAttribute("aria-label", `layer ${l} head ${h} attention weights`);
      drawHead(canvas, w);
      const cap = document.createElement("figcaption");
      cap.textContent = `head ${h}: ${info.pattern} (previous-token ${info.previous_token}, ` +
        `induction ${info.induction_score})`;
      fig.append(canvas, cap);
      grid.append(fig);
    });
    root.append(h3, grid);
  });
}

async function show(event) {
  if (event) event.preventDefault();
  const form = new FormData($("learned-form"));
  const params = new URLSearchParams({ seed: form.get("seed") || "0" });
  const tokens = (form.get("tokens") || "").trim();
  if (tokens) params.set("tokens", tokens);
  if (document.body.dataset.ready) params.set("checkpoint", form.get("checkpoint"));
  const response = await fetch(`/api/learned?${params}`);
  const data = await response.json();
  if (!response.ok) {
    const detail = Array.isArray(data.detail) ? data.detail[0]?.msg : data.detail;
    $("learned-error").textContent = detail || "the server refused the request";
    return;
  }
  $("learned-error").textContent = "";
  const slider = $("learned-form").elements.checkpoint;
  slider.max = String(data.checkpoints.length - 1);
  slider.value = String(data.checkpoint);
  const step = data.checkpoints[data.checkpoint];
  $("learned-step").textContent = data.checkpoint === data.checkpoints.length - 1
    ? `${step ?? ""} (trained)` : String(step);
  sequence(data);
  layers(data);
  document.body.dataset.ready = "true";
}

$("learned-form").addEventListener("submit", show);
$("learned-form").elements.checkpoint.addEventListener("input", () => show());
show();
