// A small line chart on a canvas, drawn by hand.

export class Chart {
  constructor(canvas, series) {
    this.canvas = canvas;
    this.series = series; // [{name, color}]
    this.points = []; // [{t, values: []}]
    this.windowMs = 5 * 60 * 1000;
  }
  add(t, values) {
    this.points.push({ t, values });
    while (this.points.length && this.points[0].t < t - this.windowMs) this.points.shift();
    this.canvas.dataset.points = String(this.points.length);
    this.draw();
  }
  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || 600, h = c.clientHeight || 160;
    if (c.width !== w * dpr) { c.width = w * dpr; c.height = h * dpr; }
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const padL = 44, padB = 18, padT = 8;
    let max = 1;
    for (const p of this.points) for (const v of p.values) if (v > max) max = v;
    max = niceMax(max);
    const now = this.points.length ? this.points[this.points.length - 1].t : Date.now();
    const x = (t) => padL + (w - padL - 4) * (1 - (now - t) / this.windowMs);
    const y = (v) => padT + (h - padT - padB) * (1 - v / max);
    g.strokeStyle = '#ccd'; g.fillStyle = '#556'; g.lineWidth = 1; g.font = '11px sans-serif';
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4;
      g.beginPath(); g.moveTo(padL, y(v)); g.lineTo(w - 4, y(v)); g.stroke();
      g.fillText(fmt(v), 2, y(v) + 4);
    }
    for (let m = 0; m <= 5; m++) g.fillText(m === 0 ? 'now' : `-${m}m`, Math.min(w - 26, Math.max(padL - 10, x(now - m * 60000) - 10)), h - 4);
    this.series.forEach((s, i) => {
      g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
      this.points.forEach((p, j) => { const f = j ? 'lineTo' : 'moveTo'; g[f](x(p.t), y(p.values[i])); });
      g.stroke();
    });
  }
}

function niceMax(v) {
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * e) return m * e;
  return 10 * e;
}
function fmt(v) { return v >= 1000 ? (v / 1000).toFixed(1) + 'k' : v === 0 ? '0' : v < 1 ? v.toPrecision(2) : v % 1 ? v.toFixed(1) : String(v); }
