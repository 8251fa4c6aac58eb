
function cellKey(text) {
  const m = text.replace(/\u2212/g, "-").match(/-?\d+(?:\.\d+)?/);
  return m ? [0, parseFloat(m[0]), text] : [1, 0, text.trim().toLowerCase()];
}
function sortTable(th) {
  const table = th.closest("table"), body = table.tBodies[0];
  const col = Array.prototype.indexOf.call(th.parentNode.children, th);
  const dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
  table.querySelectorAll("th").forEach(h => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
  const rows = Array.from(body.rows), ofGroup = col < Number(table.dataset.groupColumns || 0);
  const text = r => (r.cells[col] ? r.cells[col].textContent.trim() : "");
  const order = new Map(), label = new Map();  // a group's place, and its first filled cell in the column
  rows.forEach(r => {
    if (!order.has(r.dataset.group)) order.set(r.dataset.group, order.size);
    if (!label.get(r.dataset.group)) label.set(r.dataset.group, text(r));
  });
  rows.sort((a, b) => {
    const g = ofGroup ? 0 : order.get(a.dataset.group) - order.get(b.dataset.group);
    if (g !== 0) return g;
    const x = cellKey(ofGroup ? label.get(a.dataset.group) : text(a));
    const y = cellKey(ofGroup ? label.get(b.dataset.group) : text(b));
    if (x[0] !== y[0]) return x[0] - y[0];
    if (x[1] !== y[1]) return dir * (x[1] - y[1]);
    return dir * x[2].localeCompare(y[2]);
  });
  rows.forEach(r => body.appendChild(r));
}
document.addEventListener("click", e => {
  const th = e.target.closest("th");
  if (th && th.closest("table.sortable")) sortTable(th);
});
function filterRuns(input) {
  const words = input.value.toLowerCase().split(/\s+/).filter(w => w);
  const rows = Array.from(document.getElementById("runs-table").tBodies[0].rows);
  rows.forEach(r => {
    const text = Array.from(r.cells, c => c.textContent).join(" ").toLowerCase();
    r.hidden = !words.every(w => text.includes(w));
  });
  const shown = rows.filter(r => !r.hidden).length;
  document.getElementById("runs-shown").textContent = `${shown} of ${rows.length} runs`;
}
document.addEventListener("input", e => {
  if (e.target.id === "runs-filter") filterRuns(e.target);
});
