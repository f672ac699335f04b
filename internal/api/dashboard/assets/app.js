// hookd operator dashboard: the breaker list (/dashboard), one endpoint's
// page (/dashboard/endpoints/{id}), the message search
// (/dashboard/messages), the delivery search with retry and recovery
// (/dashboard/deliveries) and the traffic classes with their tuning
// recommendations, to apply or reject (/dashboard/classes). Data comes from the /v1 API
// with the session cookie; changes send the page's CSRF token. Polls every
// 2 s. Text from the API is only ever set as textContent.
'use strict';
(() => {
  const POLL_MS = 2000;
  const DETAIL_SLOW_MS = 5000;
  const csrf = document.querySelector('meta[name="hookd-csrf"]').content;
  const $ = (sel, root = document) => root.querySelector(sel);
  const STATE_LABEL = { closed: 'closed', open: 'open', half_open: 'half-open', isolated: 'isolated' };
  const SEVERITY = { open: 0, half_open: 1, isolated: 2, closed: 3 };

  // target names what an endpoint delivers to: an http endpoint's URL, or
  // another's type and its destination's address (a breaker's read never
  // carries credentials).
  function target(b) {
    if (!b.type || b.type === 'http') return b.url;
    const d = b.destination || {};
    const where = d.url || d.queue_url || (d.brokers || []).join(', ') || d.project || '';
    const what = d.exchange || d.subject || d.topic || d.stream || d.routing_key || '';
    return b.type + ': ' + [where, what].filter(Boolean).join(' ');
  }

  // ---- HTTP -------------------------------------------------------------

  class Unauthorized extends Error {}

  function toLogin() {
    location.assign('/dashboard/login?next=' + encodeURIComponent(location.pathname));
  }

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const opts = { method, headers, credentials: 'same-origin', cache: 'no-store' };
    if (method !== 'GET') headers['X-CSRF-Token'] = csrf;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    if (res.status === 401) {
      toLogin();
      throw new Unauthorized('session expired');
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (e) { throw new Error(`HTTP ${res.status}: not JSON`); }
    }
    if (!res.ok) throw new Error((data && (data.detail || data.title)) || `HTTP ${res.status}`);
    return data;
  }

  // listAll follows next_cursor through every page.
  async function listAll(path) {
    const out = [];
    let after = '';
    for (;;) {
      const sep = path.includes('?') ? '&' : '?';
      const page = await api('GET', path + sep + 'limit=250' + (after ? '&after=' + encodeURIComponent(after) : ''));
      out.push(...page.data);
      if (!page.next_cursor) return out;
      after = page.next_cursor;
    }
  }

  // ---- Time ---------------------------------------------------------------

  // The server's clock: the `now` of the last answer plus the local
  // monotonic time since it arrived. Countdowns never use the browser's
  // wall clock, which may be off.
  const clock = {
    base: null,
    at: 0,
    set(nowISO) { this.base = Date.parse(nowISO); this.at = performance.now(); },
    now() { return this.base === null ? null : this.base + (performance.now() - this.at); },
  };

  function fmtDuration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h}h ${String(m % 60).padStart(2, '0')}m`;
    return `${Math.floor(h / 24)}d ${h % 24}h`;
  }
  function ago(iso) {
    const now = clock.now();
    if (now === null || !iso) return '';
    const d = now - Date.parse(iso);
    return d < 1500 ? 'just now' : fmtDuration(d) + ' ago';
  }
  function localTime(iso) {
    return iso ? new Date(iso).toLocaleString() : '';
  }
  function pct(x) {
    const v = x * 100;
    return (v > 0 && v < 10 ? v.toFixed(1) : Math.round(v)) + '%';
  }

  // ---- DOM helpers --------------------------------------------------------

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  function badge(state, text) {
    return el('span', { class: 'badge st-' + state, dataset: { state }, text: text || STATE_LABEL[state] || state });
  }

  let toastTimer = 0;
  function toast(msg, isError) {
    const t = $('#toast');
    t.textContent = msg;
    t.className = 'toast' + (isError ? ' error' : '');
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 3500);
  }

  function setLive(ok, why) {
    const l = $('#live');
    l.className = 'live ' + (ok ? 'ok' : 'down');
    l.textContent = ok ? 'live' : 'reconnecting…';
    l.title = ok ? 'Updated every 2 s' : (why || '');
  }

  // poll runs fn now and then every ms after it settles; calling the
  // function it returns runs fn again at once (after a run in flight). It
  // stops after a 401: the page is leaving for the login form.
  function poll(fn, ms) {
    let timer = 0;
    let running = false;
    let again = false;
    const run = async () => {
      if (running) {
        again = true;
        return;
      }
      running = true;
      clearTimeout(timer);
      try {
        await fn();
        setLive(true);
      } catch (e) {
        if (e instanceof Unauthorized) return;
        setLive(false, e.message);
      } finally {
        running = false;
      }
      if (again) {
        again = false;
        run();
        return;
      }
      timer = setTimeout(run, ms);
    };
    run();
    return run;
  }

  // ---- Actions ------------------------------------------------------------

  const ACTIONS = {
    reset: {
      label: 'Reset', cls: 'go',
      confirm: (b) => `Reset the breaker of ${target(b)}?\n\nIt closes now with a fresh window; deliveries resume at once.`,
      path: (id) => `/v1/endpoints/${id}/breaker/reset`, body: { reason: 'reset from the dashboard' },
      done: 'Breaker reset: closed',
      shown: (b) => b.state !== 'closed',
    },
    isolate: {
      label: 'Isolate', cls: 'warn',
      confirm: (b) => `Isolate the breaker of ${target(b)}?\n\nIt stays open, refusing every delivery, until someone resets it.`,
      path: (id) => `/v1/endpoints/${id}/breaker/isolate`, body: { reason: 'isolated from the dashboard' },
      done: 'Breaker isolated',
      shown: (b) => b.state !== 'isolated',
    },
    enable: {
      label: 'Enable', cls: 'go',
      confirm: (b) => `Enable ${target(b)}?\n\nIts held deliveries are released in order.`,
      path: (id) => `/v1/endpoints/${id}/enable`, body: undefined,
      done: 'Endpoint enabled',
      shown: (b) => b.endpoint_status === 'disabled',
    },
  };

  function actionButtons(container, b, refresh) {
    for (const [name, a] of Object.entries(ACTIONS)) {
      let btn = container.querySelector(`button[data-action="${name}"]`);
      if (!btn) {
        btn = el('button', { type: 'button', class: a.cls, dataset: { action: name }, text: a.label });
        btn.addEventListener('click', async () => {
          const cur = btn._breaker;
          const done = btn._refresh;
          if (!window.confirm(a.confirm(cur))) return;
          btn.disabled = true;
          try {
            await api('POST', a.path(cur.endpoint_id), a.body);
            toast(a.done);
          } catch (e) {
            if (!(e instanceof Unauthorized)) toast(`${a.label} failed: ${e.message}`, true);
          } finally {
            btn.disabled = false;
            done();
          }
        });
        container.appendChild(btn);
      }
      btn._breaker = b;
      btn._refresh = refresh;
      btn.hidden = !a.shown(b);
      btn.setAttribute('aria-label', `${a.label} ${target(b)}`);
    }
  }

  // ---- Figures ------------------------------------------------------------

  function meter(value, limit, text, limitText, over) {
    const bar = el('div', { class: 'bar' + (over ? ' over' : '') });
    const fill = el('i');
    const frac = limit > 0 ? Math.min(1, value / limit) : 0;
    fill.style.width = (frac * 100).toFixed(1) + '%';
    bar.append(fill);
    return el('div', { class: 'meter' }, el('span', { class: 'v' }, text, el('small', { text: limitText })), bar);
  }
  // shown returns the window figures a row shows: a breaker that tripped
  // shows the window that tripped it (its own window starts empty on the
  // open), the others (an operator's isolation too) their current window.
  function shown(b) {
    if (b.state !== 'closed' && b.tripped && b.tripped.reason !== 'isolate') {
      const t = b.tripped;
      return { failure_rate: t.failure_rate, observations: t.observations, failures: t.failures, atTrip: true, at: t.at };
    }
    return { failure_rate: b.failure_rate, observations: b.observations, failures: b.failures, atTrip: false };
  }
  function rateMeter(b) {
    const v = shown(b);
    // The bar spans 0-100%; the tick marks the threshold.
    const bar = el('div', { class: 'bar' + (v.failure_rate >= b.failure_rate_threshold && v.observations > 0 ? ' over' : v.failure_rate >= b.failure_rate_threshold * 0.75 && v.observations > 0 ? ' near' : '') });
    const fill = el('i');
    fill.style.width = (Math.min(1, v.failure_rate) * 100).toFixed(1) + '%';
    const tick = el('b');
    tick.style.left = `calc(${(b.failure_rate_threshold * 100).toFixed(1)}% - 1px)`;
    bar.append(fill, tick);
    const title = v.atTrip
      ? `${v.failures} failures of ${v.observations} in the window that tripped it (${localTime(v.at)})`
      : `${v.failures} failures of ${v.observations} in the last ${b.window}`;
    return el('div', { class: 'meter', title, dataset: { atTrip: v.atTrip ? 'true' : 'false' } },
      el('span', { class: 'v' }, pct(v.failure_rate), el('small', { text: '/ ' + pct(b.failure_rate_threshold) + (v.atTrip ? ' at trip' : '') })), bar);
  }
  function obsMeter(b) {
    const v = shown(b);
    const m = meter(v.observations, b.min_throughput, String(v.observations), '/ ' + b.min_throughput + (v.atTrip ? ' at trip' : ''), false);
    m.title = v.atTrip
      ? `${v.observations} observations in the window that tripped it; the breaker may trip from ${b.min_throughput}`
      : `${v.observations} observations in the last ${b.window}; the breaker may trip from ${b.min_throughput}`;
    return m;
  }

  // nextProbe says when the breaker next lets a delivery through to probe.
  function nextProbe(b) {
    switch (b.state) {
      case 'open': {
        const now = clock.now();
        const left = Date.parse(b.open_until) - (now === null ? Date.parse(b.now) : now);
        if (left <= 0) return { text: 'due now', soon: true };
        return { text: 'in ' + fmtDuration(left), soon: left < 10000 };
      }
      case 'half_open':
        return { text: b.trial_in_flight ? 'probing now' : 'next delivery', soon: true };
      case 'isolated':
        return { text: 'held until reset', soon: false };
      default:
        return { text: '—', soon: false };
    }
  }

  function classText(b) {
    return b.traffic_class + (b.enforce ? '' : ' (shadow)');
  }

  // ---- List view ------------------------------------------------------------

  function listView() {
    $('#list-view').hidden = false;
    $('#crumbs').hidden = true; // the Breakers tab says where this is
    document.title = 'hookd · breakers';
    const tbody = $('#breakers tbody');
    const rows = new Map();
    const params = new URLSearchParams(location.search);
    const filter = { state: params.get('state') || 'all', cls: params.get('class') || '', q: params.get('q') || '' };
    let items = [];
    let refresh = () => {};

    const search = $('#search');
    const classSel = $('#class-filter');
    search.value = filter.q;

    function saveFilter() {
      const p = new URLSearchParams();
      if (filter.state !== 'all') p.set('state', filter.state);
      if (filter.cls) p.set('class', filter.cls);
      if (filter.q) p.set('q', filter.q);
      const qs = p.toString();
      history.replaceState(null, '', location.pathname + (qs ? '?' + qs : ''));
    }
    function matches(b) {
      switch (filter.state) {
        case 'all': break;
        case 'disabled': if (b.endpoint_status !== 'disabled') return false; break;
        default: if (b.state !== filter.state) return false;
      }
      if (filter.cls && b.traffic_class !== filter.cls) return false;
      if (filter.q && !target(b).toLowerCase().includes(filter.q.toLowerCase())) return false;
      return true;
    }
    for (const btn of document.querySelectorAll('#state-filter button')) {
      btn.addEventListener('click', () => {
        filter.state = btn.dataset.filter;
        saveFilter();
        render();
      });
    }
    classSel.addEventListener('change', () => { filter.cls = classSel.value; saveFilter(); render(); });
    search.addEventListener('input', () => { filter.q = search.value.trim(); saveFilter(); render(); });

    function newRow(b) {
      const link = el('a', { class: 'url', href: '/dashboard/endpoints/' + encodeURIComponent(b.endpoint_id) });
      const tr = el('tr', { dataset: { endpointId: b.endpoint_id } },
        el('td', { class: 'ep' }, link, el('div', { class: 'ids' })),
        el('td', { class: 'state', 'data-label': 'State' }),
        el('td', { class: 'rate', 'data-label': 'Failure rate' }),
        el('td', { class: 'obs', 'data-label': 'Observations' }),
        el('td', { class: 'cls', 'data-label': 'Class' }),
        el('td', { class: 'probe', 'data-label': 'Next probe' }, el('span', { class: 'countdown' })),
        el('td', { class: 'trips num', 'data-label': 'Trips 24 h' }),
        el('td', { class: 'acts' }, el('div', { class: 'actions' })));
      return tr;
    }
    function fillRow(tr, b) {
      tr.dataset.state = b.state;
      tr.dataset.endpointStatus = b.endpoint_status;
      const link = $('a.url', tr);
      link.textContent = target(b);
      $('.ids', tr).textContent = `${b.tenant_id} · ${b.endpoint_id}`;
      const state = $('td.state', tr);
      const parts = [badge(b.state)];
      if (b.state !== 'closed' && b.opened_at) {
        parts.push(el('span', { class: 'reason', title: localTime(b.opened_at), text: 'opened ' + ago(b.opened_at) }));
      }
      if (b.endpoint_status === 'disabled') {
        parts.push(badge('disabled', 'disabled'));
        parts.push(el('span', { class: 'reason', text: 'reason: ' + (b.disabled_reason || 'unknown') }));
      }
      if (!b.enforce) parts.push(badge('shadow', 'shadow'));
      state.replaceChildren(el('div', { class: 'stack' }, ...parts));
      $('td.rate', tr).replaceChildren(rateMeter(b));
      $('td.obs', tr).replaceChildren(obsMeter(b));
      $('td.cls', tr).textContent = classText(b);
      $('td.trips', tr).textContent = String(b.trips_last_24h);
      tickRow(tr, b);
      actionButtons($('.actions', tr), b, () => refresh());
    }
    function tickRow(tr, b) {
      const p = nextProbe(b);
      const c = $('.countdown', tr);
      c.textContent = p.text;
      c.classList.toggle('soon', p.soon);
      if (b.open_until && b.state === 'open') c.title = 'until ' + localTime(b.open_until);
      else c.removeAttribute('title');
    }

    function render() {
      const counts = { all: items.length, open: 0, half_open: 0, isolated: 0, disabled: 0 };
      const classes = new Set();
      for (const b of items) {
        if (b.state in counts) counts[b.state]++;
        if (b.endpoint_status === 'disabled') counts.disabled++;
        classes.add(b.traffic_class);
      }
      for (const [k, v] of Object.entries(counts)) {
        $(`[data-count="${k}"]`).textContent = String(v);
      }
      for (const btn of document.querySelectorAll('#state-filter button')) {
        btn.setAttribute('aria-pressed', String(btn.dataset.filter === filter.state));
      }
      if (filter.cls) classes.add(filter.cls);
      const have = new Set([...classSel.options].map((o) => o.value));
      for (const c of [...classes].sort()) {
        if (!have.has(c)) classSel.append(el('option', { value: c, text: c }));
      }
      classSel.value = filter.cls;

      const seen = new Set();
      const sorted = [...items].sort((a, b) =>
        (SEVERITY[a.state] - SEVERITY[b.state]) ||
        ((a.endpoint_status === 'disabled' ? 0 : 1) - (b.endpoint_status === 'disabled' ? 0 : 1)) ||
        target(a).localeCompare(target(b)) || a.endpoint_id.localeCompare(b.endpoint_id));
      let shown = 0;
      for (const b of sorted) {
        seen.add(b.endpoint_id);
        let tr = rows.get(b.endpoint_id);
        if (!tr) {
          tr = newRow(b);
          rows.set(b.endpoint_id, tr);
        }
        tr._breaker = b;
        fillRow(tr, b);
        tr.hidden = !matches(b);
        if (!tr.hidden) shown++;
        tbody.appendChild(tr); // keeps the sorted order
      }
      for (const [id, tr] of rows) {
        if (!seen.has(id)) {
          tr.remove();
          rows.delete(id);
        }
      }
      $('#list-empty').hidden = shown > 0;
      $('#list-empty').textContent = items.length ? 'No endpoint matches.' : 'No endpoints yet.';
    }

    refresh = poll(async () => {
      items = await listAll('/v1/breakers');
      if (items.length) clock.set(items[0].now);
      render();
    }, POLL_MS);
    setInterval(() => {
      for (const tr of rows.values()) tickRow(tr, tr._breaker);
    }, 1000);
  }

  // ---- Endpoint view ------------------------------------------------------

  function figure(label, value, title) {
    return el('div', { title }, el('dt', { text: label }), el('dd', {}, value));
  }

  function endpointView(id) {
    $('#detail-view').hidden = false;
    const crumbs = $('#crumbs');
    const here = el('span', { class: 'here', text: id });
    crumbs.append(' / ', here);
    const chart = $('#chart');
    window.hookdChart.legend($('#legend'));
    let breaker = null;
    let stats = null;
    let refresh = () => {};

    function renderHead(b) {
      document.title = 'hookd · ' + target(b);
      here.textContent = target(b);
      $('#d-url').textContent = target(b);
      $('#d-sub').textContent = `${b.tenant_id} · ${b.endpoint_id}`;
      const badges = [badge(b.state)];
      badges.push(b.endpoint_status === 'disabled'
        ? badge('disabled', 'disabled: ' + (b.disabled_reason || 'unknown'))
        : badge('closed', 'enabled'));
      if (!b.enforce) badges.push(badge('shadow', 'shadow mode'));
      const box = $('#d-badges');
      box.replaceChildren(...badges);
      box.dataset.state = b.state;
      box.dataset.endpointStatus = b.endpoint_status;
      actionButtons($('#d-actions'), b, () => refresh());
      $('#d-failed').href = '/dashboard/deliveries?status=failed&endpoint_id=' + encodeURIComponent(b.endpoint_id);
    }
    function renderFigures(b) {
      const p = nextProbe(b);
      $('#d-figures').replaceChildren(
        figure('Failure rate / threshold', rateMeter(b)),
        figure('Observations / min throughput', obsMeter(b)),
        figure('Window', b.window),
        figure('Class', classText(b)),
        figure('Next probe', el('span', { class: 'countdown' + (p.soon ? ' soon' : ''), text: p.text })),
        figure('Opened', b.opened_at ? ago(b.opened_at) : '—', localTime(b.opened_at)),
        figure('Trips 24 h / total', `${b.trips_last_24h} / ${b.trips}`),
        figure('Half-open trials', `${b.trial_successes} / ${b.half_open_trials}` + (b.trial_in_flight ? ' (one in flight)' : '')),
        figure('Consecutive failures', String(b.consecutive_failures)),
      );
    }
    function renderTransitions(list) {
      const tbody = $('#transitions tbody');
      tbody.replaceChildren(...list.map((t) => el('tr', {},
        el('td', { title: localTime(t.at), text: ago(t.at) }),
        el('td', {}, badge(t.from), ' → ', badge(t.to)),
        el('td', { text: t.reason + (t.shadow ? ' (shadow)' : '') }),
        el('td', { text: t.observations ? `${pct(t.failure_rate)} of ${t.observations}` : '' }),
        el('td', { text: t.actor }),
        el('td', { text: t.note }))));
      $('#transitions-empty').hidden = list.length > 0;
    }
    function renderAttempts(list) {
      const tbody = $('#attempts tbody');
      tbody.replaceChildren(...list.map((a) => {
        const outcome = a.classification === 'success' ? 'closed' : a.classification === 'failure' ? 'open' : 'disabled';
        return el('tr', {},
          el('td', { title: localTime(a.attempted_at), text: ago(a.attempted_at) }),
          el('td', {}, badge(outcome, a.classification.replace('_', ' ')), a.trial ? badge('half_open', 'trial') : null),
          el('td', { class: 'mono', text: a.status_code !== null ? 'HTTP ' + a.status_code : (a.error_class || '') }),
          el('td', { class: 'num', text: Math.round(a.duration_ms) + ' ms' }),
          el('td', { class: 'mono', text: `${a.delivery_id} #${a.attempt_number}` }),
          el('td', { class: 'excerpt mono', title: a.response_excerpt, text: a.response_excerpt }));
      }));
      $('#attempts-empty').hidden = list.length > 0;
    }
    function drawChart() {
      if (stats) window.hookdChart.draw(chart, stats);
    }
    // renderOptions shows the endpoint's delivery options and, when a
    // FIFO queue is stopped at a delivery that used up its retries, the
    // way to skip it.
    function renderOptions(ep) {
      const fifo = ep.ordering === 'fifo';
      const box = $('#d-options');
      box.dataset.ordering = ep.ordering;
      box.replaceChildren(
        figure('Ordering', fifo ? 'FIFO: one at a time, in acceptance order' : 'unordered'),
        figure('Retries used up', !fifo ? '—' : ep.on_exhausted === 'block' ? 'the queue stops' : 'the next one goes'),
        figure('Filter', ep.filter ? el('code', { class: 'mono', text: JSON.stringify(ep.filter) }) : 'none'),
        figure('Retry schedule', ep.retry_schedule ? ep.retry_schedule.join(', ') : "the dispatcher's"),
        figure('Timeout', ep.timeout || "the dispatcher's"),
        figure('Queue', !fifo ? '—' : ep.blocked_by
          ? el('span', { class: 'mono', dataset: { blocked: ep.blocked_by }, text: 'stopped at ' + ep.blocked_by })
          : 'moving'),
      );
      const actions = $('#d-options-actions');
      let skip = actions.querySelector('button[data-action="skip"]');
      if (!skip) {
        skip = el('button', { type: 'button', class: 'danger', dataset: { action: 'skip' }, text: 'Skip blocked delivery' });
        skip.addEventListener('click', async () => {
          const id = skip._blocked;
          if (!window.confirm(`Skip ${id}? It stays failed and the queue goes on with the next delivery.`)) return;
          skip.disabled = true;
          try {
            await api('POST', `/v1/deliveries/${encodeURIComponent(id)}/skip`);
            toast('Skipped: the queue goes on');
          } catch (e) {
            if (!(e instanceof Unauthorized)) toast(`Skip failed: ${e.message}`, true);
          } finally {
            skip.disabled = false;
            refresh();
          }
        });
        actions.appendChild(skip);
      }
      skip._blocked = ep.blocked_by;
      skip.hidden = !ep.blocked_by;
    }

    let slowAt = 0;
    refresh = poll(async () => {
      const b = await api('GET', `/v1/endpoints/${encodeURIComponent(id)}/breaker`);
      clock.set(b.now);
      breaker = b;
      renderHead(b);
      renderFigures(b);
      renderTransitions(b.transitions || []);
      if (performance.now() - slowAt >= DETAIL_SLOW_MS) {
        slowAt = performance.now();
        const [st, at, ep] = await Promise.all([
          api('GET', `/v1/endpoints/${encodeURIComponent(id)}/stats?minutes=60`),
          api('GET', `/v1/endpoints/${encodeURIComponent(id)}/attempts?limit=50`),
          api('GET', `/v1/endpoints/${encodeURIComponent(id)}`),
        ]);
        stats = st;
        drawChart();
        renderAttempts(at.data);
        renderOptions(ep);
      }
    }, POLL_MS);
    const forceSlow = refresh;
    refresh = () => { slowAt = 0; forceSlow(); };
    setInterval(() => { if (breaker) renderFigures(breaker); }, 1000);
    let resizeTimer = 0;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(drawChart, 150);
    });
  }

  // ---- Messages and deliveries ----------------------------------------------

  const PAGE = 50;

  // Times: the search takes RFC 3339; the inputs show local time.
  function toISO(local) {
    return local ? new Date(local).toISOString() : '';
  }
  function toLocalInput(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return '';
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  // pager pages through a search with next_cursor: load(after) fetches a
  // page and returns it; the buttons go to the next page or back to the
  // first, and the label says which page this is.
  function pager(firstBtn, nextBtn, label, load) {
    const cursors = [''];
    let next = null;
    const show = async () => {
      const page = await load(cursors[cursors.length - 1]);
      next = page.next_cursor;
      nextBtn.disabled = !next;
      firstBtn.disabled = cursors.length === 1;
      label.textContent = `page ${cursors.length}`;
      return page;
    };
    nextBtn.addEventListener('click', () => {
      if (!next) return;
      cursors.push(next);
      show().catch(showError);
    });
    firstBtn.addEventListener('click', () => {
      cursors.length = 1;
      show().catch(showError);
    });
    return {
      reload: show,
      reset() { cursors.length = 1; return show(); },
    };
  }

  function showError(e) {
    if (!(e instanceof Unauthorized)) toast(e.message, true);
  }

  function statusBadge(status) {
    return el('span', { class: 'badge st-' + status, dataset: { status }, text: status });
  }
  function endpointLink(id) {
    return el('a', { class: 'mono', href: '/dashboard/endpoints/' + encodeURIComponent(id), text: id });
  }
  function messageLink(id) {
    return el('a', { class: 'mono', href: '/dashboard/messages?id=' + encodeURIComponent(id), text: id });
  }

  function markTab(name) {
    for (const a of document.querySelectorAll('#tabs a')) {
      if (a.dataset.tab === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  // The query string holds a view's filters, so a search can be linked.
  function saveQuery(values) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(values)) if (v) p.set(k, v);
    const qs = p.toString();
    history.replaceState(null, '', location.pathname + (qs ? '?' + qs : ''));
  }

  function messagesView() {
    $('#messages-view').hidden = false;
    $('#crumbs').hidden = true;
    markTab('messages');
    document.title = 'hookd · messages';
    const params = new URLSearchParams(location.search);
    const inputs = { id: $('#m-id'), tenant_id: $('#m-tenant'), event_type: $('#m-event'), since: $('#m-since'), until: $('#m-until') };
    for (const k of ['id', 'tenant_id', 'event_type']) inputs[k].value = params.get(k) || '';
    inputs.since.value = toLocalInput(params.get('since'));
    inputs.until.value = toLocalInput(params.get('until'));
    const filter = () => ({
      id: inputs.id.value.trim(), tenant_id: inputs.tenant_id.value.trim(), event_type: inputs.event_type.value.trim(),
      since: toISO(inputs.since.value), until: toISO(inputs.until.value),
    });

    function renderDetail(m) {
      $('#m-detail').hidden = false;
      $('#m-results').hidden = true;
      $('#m-detail-id').textContent = m.id;
      $('#m-detail-deliveries').href = '/dashboard/deliveries?message_id=' + encodeURIComponent(m.id);
      $('#m-detail-figures').replaceChildren(
        figure('Tenant', m.tenant_id),
        figure('Event type', m.event_type),
        figure('Created', localTime(m.created_at)),
        figure('Idempotency key', m.idempotency_key || '—'),
      );
      $('#m-detail-payload').textContent = m.payload_expired ? '(payload expired: dropped by payload retention)' : JSON.stringify(m.payload, null, 2);
      $('#m-detail-list tbody').replaceChildren(...m.deliveries.map((d) => el('tr', { dataset: { deliveryId: d.id, status: d.status } },
        el('td', { class: 'mono', text: d.id }),
        el('td', {}, statusBadge(d.status)),
        el('td', {}, endpointLink(d.endpoint_id)),
        el('td', { class: 'num', text: String(d.attempt_count) }),
        el('td', { class: 'err', title: d.last_error || '', text: d.last_error || '' }))));
    }
    function renderList(page) {
      $('#m-detail').hidden = true;
      $('#m-results').hidden = false;
      $('#messages tbody').replaceChildren(...page.data.map((m) => el('tr', { dataset: { messageId: m.id } },
        el('td', { title: localTime(m.created_at), text: localTime(m.created_at) }),
        el('td', {}, messageLink(m.id)),
        el('td', { text: m.tenant_id }),
        el('td', { class: 'mono', text: m.event_type }),
        el('td', {}, el('a', { href: '/dashboard/deliveries?message_id=' + encodeURIComponent(m.id), text: 'deliveries' })))));
      $('#messages-empty').hidden = page.data.length > 0;
    }

    const pages = pager($('#m-first'), $('#m-next'), $('#m-page'), async (after) => {
      const f = filter();
      const q = new URLSearchParams({ limit: String(PAGE) });
      for (const k of ['tenant_id', 'event_type', 'since', 'until']) if (f[k]) q.set(k, f[k]);
      if (after) q.set('after', after);
      const page = await api('GET', '/v1/messages?' + q);
      renderList(page);
      return page;
    });
    // The page is not polled: live says whether the last search answered.
    async function search() {
      const f = filter();
      saveQuery(f);
      try {
        if (f.id) renderDetail(await api('GET', '/v1/messages/' + encodeURIComponent(f.id)));
        else await pages.reset();
        setLive(true);
      } catch (e) {
        if (!(e instanceof Unauthorized)) setLive(false, e.message);
        throw e;
      }
    }
    $('#m-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      search().catch(showError);
    });
    search().catch(showError);
  }

  function deliveriesView() {
    $('#deliveries-view').hidden = false;
    $('#crumbs').hidden = true;
    markTab('deliveries');
    document.title = 'hookd · deliveries';
    const params = new URLSearchParams(location.search);
    const statuses = new Set((params.get('status') || '').split(',').filter(Boolean));
    const inputs = { endpoint_id: $('#f-endpoint'), tenant_id: $('#f-tenant'), message_id: $('#f-message'), since: $('#f-since'), until: $('#f-until') };
    for (const k of ['endpoint_id', 'tenant_id', 'message_id']) inputs[k].value = params.get(k) || '';
    inputs.since.value = toLocalInput(params.get('since'));
    inputs.until.value = toLocalInput(params.get('until'));
    const selected = new Set();
    let shown = [];

    const filter = () => ({
      status: [...statuses].join(','),
      endpoint_id: inputs.endpoint_id.value.trim(), tenant_id: inputs.tenant_id.value.trim(), message_id: inputs.message_id.value.trim(),
      since: toISO(inputs.since.value), until: toISO(inputs.until.value),
    });
    // The filters of the list in view (the form may hold others not
    // searched yet).
    let applied = filter();
    function searchPath(f, after, limit) {
      const q = new URLSearchParams({ limit: String(limit) });
      for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
      if (after) q.set('after', after);
      return '/v1/deliveries?' + q;
    }
    function renderStatusButtons() {
      for (const b of document.querySelectorAll('#status-filter button')) {
        b.setAttribute('aria-pressed', String(statuses.has(b.dataset.status)));
      }
    }
    function renderSelection() {
      for (const id of [...selected]) if (!shown.some((d) => d.id === id && d.status === 'failed')) selected.delete(id);
      $('#selected-count').textContent = String(selected.size);
      $('#retry-selected').disabled = selected.size === 0;
      const failed = shown.filter((d) => d.status === 'failed');
      const all = $('#select-all');
      all.checked = failed.length > 0 && failed.every((d) => selected.has(d.id));
      all.disabled = failed.length === 0;
    }
    function render(page) {
      shown = page.data;
      $('#deliveries tbody').replaceChildren(...shown.map((d) => {
        const failed = d.status === 'failed';
        const box = el('input', { type: 'checkbox', class: 'pick', 'aria-label': 'Select ' + d.id, disabled: !failed });
        box.checked = selected.has(d.id);
        box.addEventListener('change', () => {
          if (box.checked) selected.add(d.id); else selected.delete(d.id);
          renderSelection();
        });
        const retry = failed ? el('button', { type: 'button', class: 'go', dataset: { action: 'retry' }, text: 'Retry', 'aria-label': 'Retry ' + d.id }) : null;
        if (retry) {
          retry.addEventListener('click', async () => {
            retry.disabled = true;
            try {
              await api('POST', `/v1/deliveries/${encodeURIComponent(d.id)}/retry`);
              toast('Delivery queued again');
            } catch (e) {
              showError(e);
            } finally {
              refresh();
            }
          });
        }
        return el('tr', { dataset: { deliveryId: d.id, status: d.status } },
          el('td', {}, box),
          el('td', { title: localTime(d.created_at), text: localTime(d.created_at) }),
          el('td', { class: 'mono', text: d.id }),
          el('td', {}, statusBadge(d.status)),
          el('td', {}, endpointLink(d.endpoint_id)),
          el('td', {}, messageLink(d.message_id)),
          el('td', { class: 'num', text: String(d.attempt_count) }),
          el('td', { class: 'err', title: d.last_error || '', text: d.last_error || '' }),
          el('td', {}, el('div', { class: 'actions' }, retry)));
      }));
      $('#deliveries-empty').hidden = shown.length > 0;
      renderSelection();
    }

    const pages = pager($('#d-first'), $('#d-next'), $('#d-page'), async (after) => {
      const page = await api('GET', searchPath(applied, after, PAGE));
      render(page);
      return page;
    });
    // The page in view is read again every 2 s, so statuses stay live.
    const refresh = poll(async () => { await pages.reload(); }, POLL_MS);

    function apply() {
      applied = filter();
      saveQuery(applied);
      renderStatusButtons();
      $('#recover').hidden = !applied.endpoint_id;
      selected.clear();
      return pages.reset();
    }
    for (const b of document.querySelectorAll('#status-filter button')) {
      b.addEventListener('click', () => {
        if (statuses.has(b.dataset.status)) statuses.delete(b.dataset.status); else statuses.add(b.dataset.status);
        apply().catch(showError);
      });
    }
    $('#d-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      apply().catch(showError);
    });
    $('#select-all').addEventListener('change', () => {
      for (const d of shown) {
        if (d.status !== 'failed') continue;
        if ($('#select-all').checked) selected.add(d.id); else selected.delete(d.id);
      }
      for (const box of document.querySelectorAll('#deliveries .pick')) {
        box.checked = selected.has(box.closest('tr').dataset.deliveryId);
      }
      renderSelection();
    });
    $('#retry-selected').addEventListener('click', async () => {
      const ids = [...selected];
      if (!ids.length || !window.confirm(`Retry ${ids.length} failed deliver${ids.length === 1 ? 'y' : 'ies'}?\n\nEach starts a new attempt series now.`)) return;
      $('#retry-selected').disabled = true;
      try {
        const res = await api('POST', '/v1/deliveries/retry', { ids });
        selected.clear();
        const refused = res.refused.length ? `; ${res.refused.length} refused (${res.refused[0].id}: ${res.refused[0].problem.detail})` : '';
        toast(`${res.queued.length} queued again${refused}`, res.refused.length > 0);
      } catch (e) {
        showError(e);
      } finally {
        refresh();
      }
    });

    // Recovery: count the failed deliveries it would send (the search
    // says), ask, then ask the API to recover them.
    const recoverSince = $('#recover-since');
    recoverSince.value = inputs.since.value;
    $('#recover-go').addEventListener('click', async () => {
      const ep = applied.endpoint_id;
      const since = toISO(recoverSince.value);
      if (!since) {
        toast('Choose since when to recover', true);
        return;
      }
      const btn = $('#recover-go');
      btn.disabled = true;
      try {
        let n = 0;
        let after = '';
        let more = false;
        for (let i = 0; i < 40; i++) {
          const page = await api('GET', searchPath({ status: 'failed', endpoint_id: ep, since }, after, 250));
          n += page.data.length;
          after = page.next_cursor;
          if (!after) break;
          more = i === 39;
        }
        const count = more ? `more than ${n}` : String(n);
        if (n === 0) {
          toast(`No failed delivery of ${ep} since ${localTime(since)}`);
          return;
        }
        if (!window.confirm(`Recover ${count} failed deliver${n === 1 ? 'y' : 'ies'} of ${ep} since ${localTime(since)}?\n\nThey are sent again oldest first, at a pace the endpoint keeps up with.`)) return;
        const res = await api('POST', `/v1/endpoints/${encodeURIComponent(ep)}/recover`, { since });
        toast(`Recovery started: ${res.queued} deliveries` + (res.payload_expired ? `; ${res.payload_expired} with their payload expired` : ''));
      } catch (e) {
        showError(e);
      } finally {
        btn.disabled = false;
        refresh();
      }
    });

    renderStatusButtons();
    $('#recover').hidden = !applied.endpoint_id;
  }

  // ---- Classes view -------------------------------------------------------

  const TUNE_FIGURES = [
    ['opens_quiet', 'Quiet-time opens', (x) => String(x)],
    ['blocked_healthy', 'Healthy requests blocked', (x) => String(x)],
    ['incidents_detected', 'Incidents detected', (x, f) => `${x} of ${f.incidents}`],
    ['detect_s_median', 'Detection, median', (x) => (x === null ? 'never' : x.toFixed(2) + ' s')],
    ['detect_s_max', 'Detection, slowest', (x) => (x === null ? 'never' : x.toFixed(2) + ' s')],
    ['wasted', 'Failures sent in incidents', (x) => String(x)],
  ];
  const CONFIG_ROWS = [
    ['trip', 'Trip'], ['failure_rate_threshold', 'Failure rate'], ['window', 'Window'], ['min_throughput', 'Min throughput'],
    ['consecutive_failures', 'Consecutive failures'], ['open_duration', 'Open duration'],
  ];

  function classesView() {
    $('#classes-view').hidden = false;
    $('#crumbs').hidden = true;
    markTab('classes');
    document.title = 'hookd · classes';
    const box = $('#classes');

    async function act(name, what) {
      const verb = what === 'apply' ? 'Apply' : 'Reject';
      const q = what === 'apply'
        ? `Apply the proposed config to class ${name}?\n\nEvery endpoint of the class runs under it at once.`
        : `Reject the proposal for class ${name}?\n\nThe class keeps its config.`;
      if (!window.confirm(q)) return;
      try {
        await api('POST', `/v1/traffic-classes/${encodeURIComponent(name)}/recommendation/${what}`);
        toast(`${verb}: ${name}`);
      } catch (e) {
        if (!(e instanceof Unauthorized)) toast(`${verb} failed: ${e.message}`, true);
      }
      refresh();
    }

    function card(c, rec) {
      const cur = rec.current || c;
      const prop = rec.proposed;
      const cfg = el('table', { class: 'list side' },
        el('thead', {}, el('tr', {}, el('th', { text: 'Config' }), el('th', { text: 'Current' }), el('th', { text: 'Proposed' }))),
        el('tbody', {}, ...CONFIG_ROWS.map(([k, label]) => el('tr', { dataset: { field: k } },
          el('th', { scope: 'row', text: label }),
          el('td', { class: 'cur', text: String(cur[k]) }),
          el('td', { class: 'prop' + (prop && String(prop[k]) !== String(cur[k]) ? ' changed' : ''), text: prop ? String(prop[k]) : '—' })))));
      const fc = rec.figures.current;
      const fp = rec.figures.proposed;
      const figs = el('table', { class: 'list side' },
        el('thead', {}, el('tr', {}, el('th', { text: 'Replayed figures' }), el('th', { text: 'Current' }), el('th', { text: 'Proposed' }))),
        el('tbody', {}, ...TUNE_FIGURES.map(([k, label, fmt]) => el('tr', { dataset: { figure: k } },
          el('th', { scope: 'row', text: label }),
          el('td', { class: 'cur', text: fc ? fmt(fc[k], fc) : '—' }),
          el('td', { class: 'prop', text: fp ? fmt(fp[k], fp) : '—' })))));
      const ev = rec.evidence;
      const evText = ev
        ? `Evidence: ${ev.endpoints} endpoints, ${ev.attempts} attempts, ${ev.incidents} incidents, from ${localTime(ev.since)} to ${localTime(ev.until)}`
        : 'No tuning pass has run.';
      const actions = el('div', { class: 'actions' });
      if (rec.status === 'proposed' || rec.status === 'shadowing') {
        actions.append(
          el('button', { type: 'button', class: 'go', dataset: { action: 'apply' }, text: 'Apply', onclick: () => act(c.name, 'apply') }),
          el('button', { type: 'button', class: 'warn', dataset: { action: 'reject' }, text: 'Reject', onclick: () => act(c.name, 'reject') }));
      }
      const shadow = rec.shadow
        ? el('p', { class: 'sub', text: `Shadow from ${localTime(rec.shadow.since)} to ${localTime(rec.shadow.until)}: ${rec.shadow.opens.length} would-be opens over ${rec.shadow.attempts} outcomes` })
        : null;
      return el('div', { class: 'card', dataset: { class: c.name, status: rec.status } },
        el('div', { class: 'card-head' },
          el('h2', { text: c.name }),
          el('span', { class: 'badge st-' + rec.status, dataset: { status: rec.status }, text: rec.status }),
          el('span', { class: 'reason', text: 'auto_tune: ' + c.auto_tune }),
          actions),
        el('div', { class: 'side-by-side' }, cfg, figs),
        el('p', { class: 'sub', text: evText }),
        shadow,
        el('ul', { class: 'reasons' }, ...(rec.reasons || []).map((r) => el('li', { text: r }))));
    }

    async function load() {
      const classes = (await api('GET', '/v1/traffic-classes')).data;
      const recs = await Promise.all(classes.map((c) => api('GET', `/v1/traffic-classes/${encodeURIComponent(c.name)}/recommendation`)));
      box.replaceChildren(...classes.map((c, i) => card(c, recs[i])));
      $('#classes-empty').hidden = classes.length > 0;
    }
    const refresh = poll(load, POLL_MS * 5);
  }

  // ---- Start --------------------------------------------------------------

  $('#logout').addEventListener('click', async () => {
    try {
      await fetch('/dashboard/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-CSRF-Token': csrf } });
    } finally {
      location.assign('/dashboard/login');
    }
  });

  const m = location.pathname.match(/^\/dashboard\/endpoints\/([A-Za-z0-9_]+)$/);
  if (m) {
    markTab('breakers');
    endpointView(m[1]);
  } else if (location.pathname === '/dashboard/messages') messagesView();
  else if (location.pathname === '/dashboard/deliveries') deliveriesView();
  else if (location.pathname === '/dashboard/classes') classesView();
  else {
    markTab('breakers');
    listView();
  }
})();
