// lockstep approvals: live updates and countdowns. The pages work without
// this file; it only keeps them current. It never builds HTML from data:
// it asks the server for the fragment it rendered (escaped by html/template)
// and swaps it in.
"use strict";
(function () {
  const body = document.body;
  const prefix = body.dataset.prefix || "";
  const page = body.dataset.page;
  const live = document.getElementById("live");

  function say(text) {
    if (!live) return;
    live.textContent = text;
    clearTimeout(say.t);
    say.t = setTimeout(function () { live.textContent = ""; }, 6000);
  }

  function fmt(ms) {
    if (ms <= 0) return "expired";
    const s = Math.floor(ms / 1000), m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    const two = function (n) { return (n < 10 ? "0" : "") + n; };
    if (s < 60) return s + "s left";
    if (m < 60) return m + "m left";
    if (h < 24) return h + "h" + two(m % 60) + "m left";
    return d + "d" + two(h % 24) + "h left";
  }
  function tick() {
    const now = Date.now();
    document.querySelectorAll("time.left[data-expires]").forEach(function (el) {
      el.textContent = fmt(Number(el.dataset.expires) - now);
    });
  }
  setInterval(tick, 1000);

  // fragment fetches server-rendered HTML and parses it in a template
  // element (inert: nothing in it runs).
  async function fragment(url) {
    const res = await fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } });
    if (!res.ok) return null;
    const t = document.createElement("template");
    const html = await res.text();
    if (page === "list") {
      const tb = document.createElement("tbody");
      tb.innerHTML = html;
      return tb;
    }
    t.innerHTML = html;
    return t.content;
  }

  function listURL() {
    const q = new URLSearchParams(location.search);
    q.set("fragment", "rows");
    return prefix + "/?" + q.toString();
  }

  // addNew adds the rows of the list the server has now that the page
  // lacks; with catchUp, it also refreshes the page's pending rows that
  // the server no longer lists as pending (decided or expired while the
  // page was not following the events).
  async function addNew(catchUp) {
    const rows = document.getElementById("rows");
    if (!rows) return;
    const got = await fragment(listURL());
    if (!got) return;
    if (catchUp) {
      const now = new Set(Array.from(got.querySelectorAll("tr[data-id]")).map(function (tr) { return tr.dataset.id; }));
      Array.from(rows.querySelectorAll("tr.state-pending[data-id]")).forEach(function (tr) {
        if (!now.has(tr.dataset.id)) refreshRow(tr.dataset.id);
      });
    }
    let added = 0;
    Array.from(got.querySelectorAll("tr[data-id]")).forEach(function (tr) {
      if (rows.querySelector('tr[data-id="' + CSS.escape(tr.dataset.id) + '"]')) return;
      const at = Number(tr.dataset.expires);
      const after = Array.from(rows.children).find(function (x) { return Number(x.dataset.expires) > at; });
      tr.classList.add("fresh");
      rows.insertBefore(tr, after || null);
      added++;
    });
    if (added) {
      const empty = document.getElementById("empty");
      if (empty) empty.hidden = true;
      say(added === 1 ? "A new approval is waiting." : added + " new approvals are waiting.");
    }
  }

  async function refreshRow(id) {
    const rows = document.getElementById("rows");
    const old = rows && rows.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
    if (!old) return;
    const got = await fragment(prefix + "/approvals/" + encodeURIComponent(id) + "?fragment=row");
    const tr = got && got.querySelector("tr[data-id]");
    if (tr) old.replaceWith(tr);
  }

  // refreshDecision shows the decision the server has; with catchUp, only
  // when the page still offers to decide and the server says it was
  // decided (or expired) meanwhile.
  async function refreshDecision(catchUp) {
    const sec = document.getElementById("decision");
    const id = body.dataset.id;
    if (!sec || !id) return;
    if (catchUp && !document.getElementById("approve")) return;
    const got = await fragment(prefix + "/approvals/" + encodeURIComponent(id) + "?fragment=decision");
    if (!got) return;
    if (catchUp && got.querySelector("#approve")) return; // still pending
    const expired = !!got.querySelector(".outcome-expired");
    sec.replaceChildren(got);
    const st = document.getElementById("state");
    if (st) st.textContent = expired ? "Expired: it can no longer be approved." : "Decided elsewhere: see below.";
    say(expired ? "This approval expired." : "This approval was decided.");
  }

  if (!window.EventSource || (page !== "list" && page !== "approval")) return;
  const es = new EventSource(prefix + "/api/v1/events");
  // The stream opens once the server follows every change; what changed
  // before (since the page was rendered, or while reconnecting) is read
  // now.
  es.addEventListener("open", function () {
    if (page === "list") addNew(true); else refreshDecision(true);
  });
  es.addEventListener("approval", function (e) {
    let ev;
    try { ev = JSON.parse(e.data); } catch (_) { return; }
    if (page === "list") {
      if (ev.kind === "new") addNew(); else refreshRow(ev.id);
    } else if (page === "approval" && ev.id === body.dataset.id && ev.kind !== "new") {
      refreshDecision();
    }
  });
})();
