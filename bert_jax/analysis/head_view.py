"""A self-contained HTML head view, after bertviz's (Vig, 2019): pick a layer and heads, and
see a line from each token on the left to each token it attends to on the right, as strong
as the attention. Hovering a token shows only its lines. The address can choose the
starting state: `head_view.html#layer=3&heads=1,9&from=4` (heads from 1, tokens from 0).

The page carries its data inline (a JSON script element) and its script and style inline:
no network, no CDN, so it opens from disk on an offline machine.
"""

import base64
import json

import numpy as np

# One colour per head (Tableau 10, then 10 more), cycled for models with more heads.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
           "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")
DATA_ELEMENT_ID = "attention-data"

_STYLE = """
body { font-family: sans-serif; margin: 16px; color: #222; }
#controls { margin-bottom: 8px; }
#controls label { margin-right: 10px; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 3px;
          vertical-align: middle; border-radius: 2px; }
text.token { font-size: 13px; cursor: default; }
text.token.active { font-weight: bold; }
#note { color: #666; font-size: 12px; margin: 6px 0; }
"""

_SCRIPT = r"""
const data = JSON.parse(document.getElementById("attention-data").textContent);
const colours = data.colours, tokens = data.tokens, numHeads = data.num_heads;
// attention: (layers, heads, tokens, tokens) bytes, weight = byte / 255, base64 encoded.
const bytes = Uint8Array.from(atob(data.attention), character => character.charCodeAt(0));
function weightOf(layer, head, from, to) {
  return bytes[((layer * numHeads + head) * tokens.length + from) * tokens.length + to] / 255;
}
const rowHeight = 20, leftX = 140, rightX = 440, width = 600;
const svgNS = "http://www.w3.org/2000/svg";
const layerSelect = document.getElementById("layer");
const headBoxes = document.getElementById("heads");
const svg = document.getElementById("view");
let focus = null;  // {side: "from" | "to", index}

data.layers.forEach((layer, index) => {
  const option = document.createElement("option");
  option.value = index; option.textContent = "layer " + layer;
  layerSelect.appendChild(option);
});
for (let head = 0; head < numHeads; head++) {
  const label = document.createElement("label");
  const box = document.createElement("input");
  box.type = "checkbox"; box.checked = true; box.value = head; box.className = "head";
  box.addEventListener("change", draw);
  const swatch = document.createElement("span");
  swatch.className = "swatch"; swatch.style.background = colours[head % colours.length];
  label.append(box, swatch, "head " + (head + 1));
  headBoxes.appendChild(label);
}
function setAll(checked) {
  document.querySelectorAll("input.head").forEach(box => { box.checked = checked; });
  draw();
}
document.getElementById("all").addEventListener("click", () => setAll(true));
document.getElementById("none").addEventListener("click", () => setAll(false));
layerSelect.addEventListener("change", draw);

function element(name, attributes) {
  const node = document.createElementNS(svgNS, name);
  for (const key in attributes) node.setAttribute(key, attributes[key]);
  return node;
}
function tokenText(x, y, index, side, anchor) {
  const node = element("text", {x: x, y: y, "text-anchor": anchor, class: "token",
                                 "dominant-baseline": "middle"});
  node.textContent = tokens[index];
  if (focus && focus.side === side && focus.index === index) node.classList.add("active");
  node.addEventListener("mouseenter", () => { focus = {side: side, index: index}; draw(); });
  node.addEventListener("mouseleave", () => { focus = null; draw(); });
  return node;
}
function draw() {
  const layer = Number(layerSelect.value);
  const heads = [...document.querySelectorAll("input.head")]
      .filter(box => box.checked).map(box => Number(box.value));
  svg.replaceChildren();
  svg.setAttribute("height", tokens.length * rowHeight + 30);
  svg.setAttribute("width", width);
  svg.appendChild(Object.assign(element("text", {x: leftX, y: 10, "text-anchor": "end",
      "font-size": 11, fill: "#666"}), {textContent: "from"}));
  svg.appendChild(Object.assign(element("text", {x: rightX, y: 10, "font-size": 11,
      fill: "#666"}), {textContent: "to"}));
  let lines = 0;
  for (const head of heads) {
    for (let from = 0; from < tokens.length; from++) {
      if (focus && focus.side === "from" && focus.index !== from) continue;
      for (let to = 0; to < tokens.length; to++) {
        if (focus && focus.side === "to" && focus.index !== to) continue;
        const weight = weightOf(layer, head, from, to);
        if (weight < data.min_weight) continue;
        svg.appendChild(element("line", {
          x1: leftX + 6, y1: 30 + from * rowHeight, x2: rightX - 6, y2: 30 + to * rowHeight,
          stroke: colours[head % colours.length], "stroke-width": 2,
          "stroke-opacity": Math.min(1, weight * (focus ? 1.2 : 0.9))}));
        lines++;
      }
    }
  }
  tokens.forEach((token, index) => {
    svg.appendChild(tokenText(leftX, 30 + index * rowHeight, index, "from", "end"));
    svg.appendChild(tokenText(rightX, 30 + index * rowHeight, index, "to", "start"));
  });
  document.body.dataset.lines = lines;  // read by the browser test
  document.body.dataset.rendered = "yes";
}
// An address such as head_view.html#layer=3&heads=1,9&from=4 opens in that state.
const wanted = new URLSearchParams(location.hash.slice(1));
if (wanted.has("layer")) {
  const index = data.layers.indexOf(Number(wanted.get("layer")));
  if (index >= 0) layerSelect.value = index;
}
if (wanted.has("heads")) {
  const heads = wanted.get("heads").split(",").map(head => Number(head) - 1);
  document.querySelectorAll("input.head").forEach(box => {
    box.checked = heads.includes(Number(box.value)); });
}
for (const side of ["from", "to"]) {
  if (wanted.has(side)) focus = {side: side, index: Number(wanted.get(side))};
}
draw();
"""


def page_data(tokens: list[str], attention: np.ndarray, layers: list[int] | None = None,
              min_weight: float = 0.01) -> dict:
    """The JSON the page embeds: tokens, layer numbers, and attention (L, H, T, T) as one
    byte per weight (weight * 255, rounded), base64: plenty for line opacity, and 5x smaller
    than decimal text, which matters at hundreds of tokens (L*H*T^2 weights)."""
    num_layers, num_heads = attention.shape[:2]
    quantized = np.round(np.clip(attention, 0.0, 1.0) * 255).astype(np.uint8)
    return dict(tokens=list(tokens), layers=list(layers or range(1, num_layers + 1)),
                num_heads=num_heads, colours=list(COLOURS), min_weight=min_weight,
                shape=list(attention.shape),
                attention=base64.b64encode(quantized.tobytes()).decode("ascii"))


def head_view_html(tokens: list[str], attention: np.ndarray, title: str = "attention",
                   layers: list[int] | None = None) -> str:
    """The whole page for (L, H, T, T) `attention` over `tokens`, as one string."""
    from html import escape

    data = page_data(tokens, attention, layers)
    payload = json.dumps(data, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # a token such as "</script>" cannot end the data
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(title)}: head view</title>
<style>{_STYLE}</style>
</head>
<body>
<h3>{escape(title)}</h3>
<div id="controls">
  <label>Layer <select id="layer"></select></label>
  <button id="all" type="button">all heads</button>
  <button id="none" type="button">no heads</button>
  <div id="heads"></div>
</div>
<div id="note">Lines go from each token (left) to the tokens it attends to (right), one colour
per head, opacity = attention weight (below {data['min_weight']} not
drawn). Hover a token to see only its lines.</div>
<svg id="view" xmlns="http://www.w3.org/2000/svg"></svg>
<script type="application/json" id="{DATA_ELEMENT_ID}">{payload}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""


def read_page_data(html: str) -> dict:
    """The data embedded in a page written by `head_view_html`, its attention decoded to
    floats (L, H, T, T) (for tests and notebooks)."""
    start_tag = f'<script type="application/json" id="{DATA_ELEMENT_ID}">'
    start = html.index(start_tag) + len(start_tag)
    end = html.index("</script>", start)
    data = json.loads(html[start:end].replace("<\\/", "</"))
    quantized = np.frombuffer(base64.b64decode(data["attention"]), np.uint8)
    data["attention"] = quantized.reshape(data["shape"]).astype(np.float64) / 255
    return data
