// A small SVG chart of an endpoint's outcomes per minute (stacked bars)
// with its breaker transitions marked as vertical lines. No dependencies:
// it draws from GET /v1/endpoints/{id}/stats. Colours come from the
// stylesheet's classes, so the chart follows light and dark.
'use strict';
window.hookdChart = (() => {
  const NS = 'http://www.w3.org/2000/svg';
  // Bottom to top.
  const OUTCOMES = ['success', 'ignore', 'blocked', 'auth_failure', 'failure'];
  const LABELS = { success: 'success', failure: 'failure', ignore: 'ignored', auth_failure: 'auth failure', blocked: 'blocked' };
  const STATE = { closed: 'closed', open: 'open', half_open: 'half-open', isolated: 'isolated' };

  function svg(tag, attrs, parent) {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }
  function title(parent, text) {
    svg('title', {}, parent).textContent = text;
  }
  // niceMax rounds up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (v <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function hhmm(ms) {
    const d = new Date(ms);
    return String(d.getHours()).padStart(2, '0') + ':' + String(d.getMinutes()).padStart(2, '0');
  }
  function hhmmss(ms) {
    return hhmm(ms) + ':' + String(new Date(ms).getSeconds()).padStart(2, '0');
  }

  function legend(el) {
    if (el.childElementCount) return;
    for (const o of [...OUTCOMES].reverse()) {
      const s = document.createElement('span');
      s.className = 'lg-' + o;
      s.textContent = LABELS[o];
      el.appendChild(s);
    }
    const m = document.createElement('span');
    m.className = 'lg-mark line';
    m.textContent = 'breaker transition';
    el.appendChild(m);
  }

  function draw(container, stats) {
    const width = Math.max(280, container.clientWidth || 600);
    const height = width < 520 ? 180 : 220;
    const pad = { l: 34, r: 8, t: 14, b: 22 };
    const w = width - pad.l - pad.r;
    const h = height - pad.t - pad.b;
    const minutes = stats.minutes;
    const n = minutes.length;
    const from = Date.parse(stats.from);
    const span = n * 60000;
    const band = w / n;
    const x = (ms) => pad.l + ((ms - from) / span) * w;

    let top = 0;
    let total = 0;
    for (const m of minutes) {
      const sum = OUTCOMES.reduce((a, o) => a + m[o], 0);
      top = Math.max(top, sum);
      total += sum;
    }
    const ymax = niceMax(top);
    const y = (v) => pad.t + h - (v / ymax) * h;

    const root = svg('svg', {
      width, height, viewBox: `0 0 ${width} ${height}`, class: 'chart-svg', role: 'img',
      'aria-label': `${total} attempts and ${stats.transitions.length} breaker transitions in the last ${n} minutes`,
    });

    // Grid and y labels.
    for (const v of [0, ymax / 2, ymax]) {
      svg('line', { class: 'grid', x1: pad.l, x2: pad.l + w, y1: y(v), y2: y(v) }, root);
      const t = svg('text', { x: pad.l - 5, y: y(v) + 4, 'text-anchor': 'end' }, root);
      t.textContent = Number.isInteger(v) ? String(v) : v.toFixed(1);
    }
    // X labels: whole minutes, at least ~56 px apart.
    const every = [1, 2, 5, 10, 15, 30, 60, 120, 240].find((s) => s * band >= 56) || 240;
    minutes.forEach((m, i) => {
      const ms = Date.parse(m.minute);
      if (new Date(ms).getMinutes() % every !== 0 && every <= 60) return;
      if (every > 60 && (ms / 60000) % every !== 0) return;
      const t = svg('text', { x: pad.l + i * band, y: height - 6, 'text-anchor': 'middle' }, root);
      t.textContent = hhmm(ms);
    });

    // Bars.
    const bw = Math.max(1, band * 0.78);
    const bars = svg('g', { class: 'bars' }, root);
    minutes.forEach((m, i) => {
      const g = svg('g', {}, bars);
      let acc = 0;
      for (const o of OUTCOMES) {
        if (!m[o]) continue;
        svg('rect', {
          class: 'o-' + o, x: pad.l + i * band + (band - bw) / 2, width: bw,
          y: y(acc + m[o]), height: Math.max(0.5, y(acc) - y(acc + m[o])),
        }, g);
        acc += m[o];
      }
      if (acc) {
        const parts = OUTCOMES.filter((o) => m[o]).map((o) => `${m[o]} ${LABELS[o]}`);
        title(g, `${hhmm(Date.parse(m.minute))}: ${parts.join(', ')}`);
      }
    });
    if (!total) {
      const t = svg('text', { x: pad.l + w / 2, y: pad.t + h / 2, 'text-anchor': 'middle', class: 'nodata' }, root);
      t.textContent = `No attempts in the last ${n} minutes`;
    }

    // Transitions.
    const marks = svg('g', { class: 'marks' }, root);
    for (const tr of stats.transitions) {
      const at = Date.parse(tr.at);
      const mx = Math.min(pad.l + w, Math.max(pad.l, x(at)));
      const g = svg('g', { class: 'mark to-' + tr.to, 'data-to': tr.to }, marks);
      svg('line', { x1: mx, x2: mx, y1: pad.t - 4, y2: pad.t + h }, g);
      svg('circle', { cx: mx, cy: pad.t - 4, r: 4 }, g);
      let text = `${hhmmss(at)} ${STATE[tr.from] || tr.from} → ${STATE[tr.to] || tr.to} (${tr.reason})`;
      if (tr.actor) text += ` by ${tr.actor}`;
      if (tr.note) text += `: ${tr.note}`;
      title(g, text);
    }

    container.replaceChildren(root);
  }

  return { draw, legend };
})();
