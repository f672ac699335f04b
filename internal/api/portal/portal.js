// The tenant portal: exchanges its URL's one-time code for the portal
// cookie (then drops the code from the address), and manages the
// session's tenant's endpoints through /v1. No build step.
"use strict";

// open and revealed survive the page's refreshes: the endpoints whose
// attempts are shown, and the secrets revealed.
// recover keeps each endpoint's recovery form across refreshes (its input
// and any confirmation pending).
const state = { csrf: "", readOnly: true, tenant: "", open: new Set(), revealed: {}, recover: {} };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function say(text) { document.getElementById("status").textContent = text; }

async function call(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = state.csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) {
    const field = data && data.errors && data.errors.length ? data.errors[0].field + ": " + data.errors[0].message : "";
    const err = new Error((data && data.detail) || r.statusText + (field ? " (" + field + ")" : ""));
    err.status = r.status;
    throw err;
  }
  return data;
}

// Text on the brand colour: black or white, whichever contrasts more.
function onColour(hex) {
  const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255)
    .map((v) => (v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4)));
  const l = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  return (l + 0.05) / 0.05 > 1.05 / (l + 0.05) ? "#000000" : "#ffffff";
}

function applyTheme(theme) {
  const root = document.documentElement.style;
  if (theme.brand_color && /^#[0-9A-Fa-f]{6}$/.test(theme.brand_color)) {
    root.setProperty("--brand", theme.brand_color);
    root.setProperty("--on-brand", onColour(theme.brand_color));
  }
  if (theme.name) {
    document.getElementById("title").textContent = theme.name;
    document.title = theme.name;
  }
  if (theme.logo_url && theme.logo_url.startsWith("https://")) {
    const logo = document.getElementById("logo");
    logo.src = theme.logo_url;
    logo.alt = (theme.name || "") + " logo";
    logo.hidden = false;
  }
}

function seconds(iso, now) { return Math.max(0, Math.round((Date.parse(iso) - now) / 1000)); }

// health puts an endpoint's breaker and status in words.
function health(ep, b) {
  if (ep.status === "disabled") {
    const why = ep.disabled_reason || "";
    if (/40[13]/.test(why)) return { cls: "bad", text: "Disabled after repeated " + (why.match(/40[13]/) || ["401"])[0] + " responses: check the credentials, then enable" };
    return { cls: "bad", text: "Disabled" + (why ? ": " + why : "") + ". Enable it to deliver again" };
  }
  if (!b) return { cls: "ok", text: "Healthy" };
  const now = Date.parse(b.now) || Date.now();
  let pct = Math.round((b.failure_rate || 0) * 100);
  switch (b.state) {
    case "open":
      // A trip starts a fresh window: the rate that tripped it is the
      // latest open transition's.
      if (b.trip) pct = Math.round(b.trip.failure_rate * 100);
      return { cls: "bad", text: "Paused: " + pct + "% of deliveries failed in the last " + b.window + "; next try in " + seconds(b.open_until, now) + " s" };
    case "half_open":
      return { cls: "warn", text: "Recovering: trying a delivery to see whether the endpoint is back" };
    case "isolated":
      return { cls: "bad", text: "Paused by the operator" };
  }
  if (b.observations > 0 && pct > 0) return { cls: "warn", text: "Delivering: " + pct + "% of deliveries failed in the last " + b.window };
  return { cls: "ok", text: "Healthy" };
}

async function showAttempts(ep, box) {
  const list = await call("GET", "/v1/endpoints/" + ep.id + "/attempts?limit=10");
  if (!list.data.length) { box.replaceChildren(el("p", { class: "meta" }, "No attempts yet.")); return; }
  const rows = list.data.map((a) => el("tr", {},
    el("td", {}, new Date(a.attempted_at).toLocaleTimeString()),
    el("td", {}, a.status_code ? String(a.status_code) : (a.error_class || a.classification)),
    el("td", { class: "excerpt" }, a.response_excerpt || ""),
    el("td", {}, state.readOnly ? "" : el("button", { type: "button", "data-action": "resend", "aria-label": "Resend delivery " + a.delivery_id,
      onclick: async () => { await act(() => call("POST", "/v1/deliveries/" + a.delivery_id + "/retry"), "Delivery queued again"); } }, "Resend"))));
  box.replaceChildren(el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "When"), el("th", {}, "Answer"), el("th", {}, "Response"), el("th", {}, ""))), el("tbody", {}, ...rows)));
}

// countCap bounds how many failed deliveries the confirmation counts.
const countCap = 10000;

// countFailed counts ep's failed deliveries since an RFC 3339 time, paging
// through the deliveries search; it stops at countCap.
async function countFailed(ep, since) {
  let n = 0, after = "";
  for (;;) {
    const page = await call("GET", "/v1/deliveries?status=failed&limit=250&endpoint_id=" + encodeURIComponent(ep.id) +
      "&since=" + encodeURIComponent(since) + (after ? "&after=" + encodeURIComponent(after) : ""));
    n += page.data.length;
    if (n >= countCap) return { n: countCap, more: true };
    if (!page.next_cursor) return { n, more: false };
    after = page.next_cursor;
  }
}

// localInput formats a time for a datetime-local input, in local time.
function localInput(d) {
  const p = (v) => String(v).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + "T" + p(d.getHours()) + ":" + p(d.getMinutes());
}

function plural(n, one, many) { return n.toLocaleString("en-US") + " " + (n === 1 ? one : many); }

// recoverForm is the endpoint's "Recover failed deliveries since" form:
// the time (24 h ago by default), then a confirmation saying how many
// failed deliveries it covers, then the recovery. One element per
// endpoint, kept across refreshes.
function recoverForm(ep) {
  if (state.recover[ep.id]) return state.recover[ep.id];
  const id = "recover-since-" + ep.id;
  const input = el("input", { id, name: "since", type: "datetime-local", required: "", value: localInput(new Date(Date.now() - 24 * 3600 * 1000)) });
  const confirmBox = el("div", { class: "confirm", hidden: "", role: "group", "aria-label": "Confirm the recovery" });
  const hideConfirm = () => { confirmBox.hidden = true; confirmBox.replaceChildren(); };
  input.addEventListener("input", hideConfirm);
  const form = el("form", { class: "recover", "data-recover": "" },
    el("label", { for: id }, "Recover failed deliveries since"),
    input,
    el("button", { type: "submit", "data-action": "recover" }, "Recover failed deliveries…"),
    confirmBox);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const at = new Date(input.value);
    if (isNaN(at)) { say("Failed: choose a date and time"); return; }
    const since = at.toISOString();
    let c;
    try { c = await countFailed(ep, since); } catch (e) { say("Failed: " + e.message); return; }
    if (c.n === 0) { hideConfirm(); say("No failed deliveries since " + at.toLocaleString() + ": nothing to recover"); return; }
    const what = (c.more ? countCap.toLocaleString("en-US") + "+ failed deliveries" : plural(c.n, "failed delivery", "failed deliveries"));
    const yes = el("button", { type: "button", class: "primary", "data-action": "recover-confirm", "aria-describedby": id + "-confirm", onclick: async () => {
      hideConfirm();
      try {
        const r = await call("POST", "/v1/endpoints/" + ep.id + "/recover", { since });
        let text = "Queued " + plural(r.queued, "delivery", "deliveries") + "; they are sent at a pace the endpoint takes";
        if (r.payload_expired) text += ". " + plural(r.payload_expired, "failed delivery has", "failed deliveries have") + " no payload left to send";
        say(text);
        await load();
      } catch (e) {
        say(e.status === 409
          ? "A recovery of this endpoint is still releasing its deliveries: try again once it has released them all"
          : "Failed: " + e.message);
      }
    } }, "Recover them");
    const no = el("button", { type: "button", "data-action": "recover-cancel", onclick: () => { hideConfirm(); input.focus(); } }, "Cancel");
    confirmBox.replaceChildren(el("p", { id: id + "-confirm", "data-confirm": "" }, "This sends again " + what + " since " + at.toLocaleString() + "."), yes, no);
    confirmBox.hidden = false;
    yes.focus();
  });
  state.recover[ep.id] = form;
  return form;
}

// options puts an endpoint's delivery options in words.
function options(ep) {
  const parts = [];
  if (ep.ordering === "fifo") {
    parts.push("In order, one at a time" + (ep.on_exhausted === "block" ? "; stops at a delivery that uses up its retries" : ""));
  }
  if (ep.filter) parts.push("Only messages matching " + JSON.stringify(ep.filter));
  if (ep.retry_schedule) {
    const n = ep.retry_schedule.length;
    parts.push(n === 1 ? "1 attempt, no retry" : n + " attempts, retried after " + ep.retry_schedule.slice(1).join(", "));
  }
  if (ep.timeout) parts.push("Timeout " + ep.timeout);
  return parts.length ? parts.join(" · ") : "Every message, retried on the service's schedule";
}

// blocked is a FIFO endpoint's stopped queue: what stopped it, and (unless
// read-only) the two ways on.
function blocked(ep) {
  const box = el("div", { class: "blocked", "data-blocked": ep.blocked_by },
    el("p", { class: "health bad" }, "Stopped: delivery " + ep.blocked_by + " used up its retries. Later messages wait until it is retried or skipped."));
  if (!state.readOnly) {
    box.append(
      el("button", { type: "button", "data-action": "retry-blocked", onclick: () => act(() => call("POST", "/v1/deliveries/" + ep.blocked_by + "/retry"), "Delivery queued again, ahead of the rest") }, "Retry it"),
      el("button", { type: "button", "data-action": "skip-blocked", class: "danger", onclick: () => {
        if (confirm("Skip delivery " + ep.blocked_by + "? It stays failed and the next message goes.")) act(() => call("POST", "/v1/deliveries/" + ep.blocked_by + "/skip"), "Delivery skipped; the next one goes");
      } }, "Skip it"));
  }
  return box;
}

async function act(fn, done) {
  try { await fn(); say(done); await load(); } catch (e) { say("Failed: " + e.message); }
}

// target names what an endpoint delivers to: its URL, or its type and
// the destination's address (credentials are never part of a read).
function target(ep) {
  if (!ep.type || ep.type === "http") return ep.url;
  const d = ep.destination || {};
  const where = d.url || d.queue_url || (d.brokers || []).join(", ") || d.project || "";
  const what = d.exchange || d.subject || d.topic || d.stream || d.routing_key || "";
  return ep.type + ": " + [where, what].filter(Boolean).join(" ");
}

function card(ep, b) {
  const h = health(ep, b);
  const attempts = el("div", { class: "attempts" });
  const secret = el("p", { class: "secret", hidden: "" });
  const li = el("li", { class: "card", "data-endpoint": ep.id },
    el("h3", {}, target(ep)),
    el("p", { class: "health " + h.cls, "data-health": "" }, h.text),
    el("p", { class: "meta" }, "Events: " + (ep.event_types.length ? ep.event_types.join(", ") : "all")),
    el("p", { class: "meta", "data-options": "" }, "Delivery: " + options(ep)),
    secret, attempts);
  if (ep.blocked_by) li.insertBefore(blocked(ep), secret);
  if (state.revealed[ep.id]) { secret.textContent = state.revealed[ep.id]; secret.hidden = false; }
  if (state.open.has(ep.id)) showAttempts(ep, attempts).catch((e) => say(e.message));
  const buttons = [el("button", { type: "button", "data-action": "attempts", "aria-expanded": String(state.open.has(ep.id)), onclick: () => {
    if (state.open.has(ep.id)) { state.open.delete(ep.id); attempts.replaceChildren(); return; }
    state.open.add(ep.id);
    showAttempts(ep, attempts).catch((e) => say(e.message));
  } }, "Recent attempts")];
  if (!state.readOnly) {
    buttons.push(
      el("button", { type: "button", "data-action": "reveal", onclick: async () => {
        try { const s = await call("GET", "/v1/endpoints/" + ep.id + "/secret"); state.revealed[ep.id] = s.secret; secret.textContent = s.secret; secret.hidden = false; } catch (e) { say(e.message); }
      } }, "Reveal secret"),
      el("button", { type: "button", "data-action": "rotate", onclick: () => act(() => call("POST", "/v1/endpoints/" + ep.id + "/secret/rotate"), "Secret rotated; the old one signs for 24 hours more") }, "Rotate secret"),
      el("button", { type: "button", "data-action": "test", onclick: () => act(() => call("POST", "/v1/messages", { tenant_id: state.tenant, event_type: ep.event_types[0] || "hookd.test", payload: { test: true, sent_at: new Date().toISOString() } }), "Test event sent") }, "Send test event"),
      ...(!ep.type || ep.type === "http" ? [el("button", { type: "button", "data-action": "edit", onclick: () => {
        const url = prompt("New URL", ep.url);
        if (url) act(() => call("PATCH", "/v1/endpoints/" + ep.id, { url }), "Endpoint updated");
      } }, "Edit URL")] : []),
      ep.status === "disabled"
        ? el("button", { type: "button", "data-action": "enable", onclick: () => act(() => call("POST", "/v1/endpoints/" + ep.id + "/enable"), "Endpoint enabled") }, "Enable")
        : el("button", { type: "button", "data-action": "disable", onclick: () => act(() => call("POST", "/v1/endpoints/" + ep.id + "/disable"), "Endpoint disabled") }, "Disable"),
      el("button", { type: "button", "data-action": "delete", class: "danger", onclick: () => {
        if (confirm("Delete " + target(ep) + "?")) act(() => call("DELETE", "/v1/endpoints/" + ep.id), "Endpoint deleted");
      } }, "Delete"));
  }
  li.append(el("div", {}, ...buttons));
  if (!state.readOnly) li.append(recoverForm(ep));
  return li;
}

async function load() {
  const [eps, brs] = await Promise.all([call("GET", "/v1/endpoints?limit=100"), call("GET", "/v1/breakers?limit=100")]);
  const byID = {};
  for (const b of brs.data) byID[b.endpoint_id] = b;
  await Promise.all(brs.data.filter((b) => b.state === "open").map(async (b) => {
    const detail = await call("GET", "/v1/endpoints/" + b.endpoint_id + "/breaker");
    const opens = (detail.transitions || []).filter((tr) => tr.to === "open").sort((x, y) => Date.parse(y.at) - Date.parse(x.at));
    if (opens.length) b.trip = opens[0];
  }));
  const list = document.getElementById("endpoints");
  list.replaceChildren(...eps.data.map((ep) => card(ep, byID[ep.id])));
  if (!eps.data.length) list.append(el("li", { class: "meta" }, "No endpoints yet."));
}

async function start() {
  const m = location.hash.match(/^#code=([A-Za-z0-9_-]+)$/);
  let info;
  try {
    if (m) {
      // The code opens the session once: drop it from the address first.
      history.replaceState(null, "", location.pathname);
      info = await call("POST", "/portal/session", { code: m[1] });
    } else {
      info = await call("GET", "/portal/session");
    }
  } catch (e) {
    say(m ? "This link was used already or has expired: ask for a new one." : "Open the portal from its link.");
    return;
  }
  state.csrf = info.csrf;
  state.readOnly = info.read_only;
  state.tenant = info.tenant_id;
  applyTheme(info.theme || {});
  document.getElementById("access").hidden = !info.read_only;
  document.getElementById("create").hidden = info.read_only;
  document.getElementById("create-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const types = f.event_types.value.split(",").map((s) => s.trim()).filter(Boolean);
    const body = { tenant_id: state.tenant, url: f.url.value, event_types: types };
    if (f.ordered.checked) body.ordering = "fifo";
    act(() => call("POST", "/v1/endpoints", body), "Endpoint added").then(() => f.reset());
  });
  say("");
  await load().catch((e) => say(e.message));
  // A refresh rebuilds the cards: none while a recovery form has the focus.
  const refresh = setInterval(() => {
    if (document.activeElement && document.activeElement.closest("form.recover")) return;
    load().catch(() => {});
  }, 5000);
  // Logging out ends the session on the server: its cookie, a copy of it
  // included, reaches nothing from then.
  const logout = document.getElementById("logout");
  logout.hidden = false;
  logout.addEventListener("click", async () => {
    try {
      await call("POST", "/portal/logout");
    } catch (e) {
      say("Failed: " + e.message);
      return;
    }
    clearInterval(refresh);
    logout.hidden = true;
    document.getElementById("create").hidden = true;
    document.getElementById("endpoints").replaceChildren();
    say("You are logged out. Open the portal from a new link to come back.");
  });
}

start();
