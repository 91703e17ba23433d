// The review page's buttons: push (to the branch or as a pull request), discard, restore a
// checkpoint (the whole zone, or the files of the diff shown), and the timeline's compare button.
// Each action asks first, naming what it will change, then is a same-origin POST with the page's
// token in a header; the answer is shown as text (never as HTML), kept across the reload that
// shows the new state. Times (<time class="when">, sent as UTC) are shown relative to now, or in
// local time when older than a day; their title keeps the exact time in UTC.
"use strict";

(function () {
  const token = document.body.dataset.token;
  const flash = document.getElementById("flash");
  /// Paths of a restore result listed by name; the rest are counted.
  const LISTED = 50;

  function show(kind, text) {
    flash.hidden = false;
    flash.className = kind;
    flash.textContent = text;
  }

  function element(tag, text, id) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (id) e.id = id;
    return e;
  }

  // What a restore did: counts, the paths (as text), and the checkpoint that undoes it, which
  // is marked in the timeline.
  function showRestore(kind, text, a) {
    show(kind, "");
    flash.appendChild(element("p", text));
    for (const [name, paths] of [["restored", a.restored], ["removed", a.removed],
      ["conflicts", a.conflicts], ["left as they are (kept by size only)", a.not_kept]]) {
      if (!paths || paths.length === 0) continue;
      const d = element("details");
      d.className = "restore-" + name.split(" ")[0];
      d.appendChild(element("summary", name + " (" + paths.length + ")"));
      const ul = element("ul");
      for (const p of paths.slice(0, LISTED)) ul.appendChild(element("li", p));
      if (paths.length > LISTED) ul.appendChild(element("li", "and " + (paths.length - LISTED) + " more"));
      d.appendChild(ul);
      flash.appendChild(d);
    }
    flash.appendChild(element("p", "Checkpoint #" + a.before + " holds the zone as it was just " +
      "before this restore: restore it to undo this one.", "undo-hint"));
    const undo = document.getElementById("checkpoint-" + a.before);
    if (undo) {
      undo.classList.add("undo");
      const badge = element("span", "undoes the restore of #" + a.checkpoint);
      badge.className = "badge undo-badge";
      undo.querySelector(".cp-head").appendChild(badge);
    }
  }

  const saved = sessionStorage.getItem("wardfs-flash");
  if (saved) {
    sessionStorage.removeItem("wardfs-flash");
    try {
      const f = JSON.parse(saved);
      if (f.restore) showRestore(f.kind, f.text, f.restore);
      else show(f.kind, f.text);
    } catch (_) { /* ignore a damaged message */ }
  }

  const NAMES = { push: "Push", discard: "Discard", restore: "Restore" };
  const BUSY = { push: "pushing…", discard: "discarding…", restore: "restoring…" };

  function describe(action, pr, answer) {
    if (action === "discard") {
      let text = "Discarded " + answer.id + ".";
      for (const p of answer.reverted || []) text += " Reverted " + p + ".";
      for (const k of answer.kept || []) text += " Kept " + k.path + ": " + k.reason + ".";
      return text;
    }
    if (action === "restore") {
      return "Restored checkpoint #" + answer.checkpoint + ": " + answer.restored.length +
        " restored, " + answer.removed.length + " removed, " + answer.conflicts.length +
        " conflicts.";
    }
    let text = "Pushed " + answer.id + " as " + String(answer.commit_sha).slice(0, 12) +
      " to " + answer.pushed_ref + (answer.rebased ? " (rebased onto the moved branch)" : "") + ".";
    if (pr && answer.url) text += " Pull request: " + answer.url;
    return text;
  }

  // What a push will do, for its confirmation: the branch and the remote it goes to.
  function pushQuestion(button) {
    const b = button.dataset;
    if (b.pr === "true") {
      return "Push staged commit " + b.id + " to branch wardfs/" + b.id + " of " + b.remote +
        " and open a pull request against " + b.branch + "?";
    }
    return "Push staged commit " + b.id + " straight to branch " + b.branch + " of " + b.remote +
      "? Everyone who uses " + b.branch + " gets it; there is no review on the server first.";
  }

  // The request body of an action, or null when the person said no.
  function request(action, button) {
    const id = button.dataset.id;
    if (action === "push") {
      return window.confirm(pushQuestion(button)) ? { id: id, pr: button.dataset.pr === "true" } : null;
    }
    if (action === "discard") {
      return window.confirm("Discard staged commit " + id + "?") ? { id: id } : null;
    }
    const zone = document.getElementById("timeline").dataset.zone;
    const paths = button.dataset.scope === "diff"
      ? Array.from(document.querySelectorAll("#diff details.file"), (d) => d.dataset.path)
      : [];
    const what = paths.length > 0 ? paths.length + " files of /" + zone : "all of /" + zone;
    const ok = window.confirm("Restore " + what + " as it was at checkpoint #" + id + "? " +
      "The present is checkpointed first, so this restore can be undone.");
    return ok ? { id: Number(id), paths: paths } : null;
  }

  async function act(button) {
    const action = button.dataset.action;
    const id = button.dataset.id;
    const body = request(action, button);
    if (body === null) return;
    const card = button.closest(".card");
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    const busy = card.querySelector(".busy");
    busy.hidden = false;
    busy.textContent = BUSY[action];
    let saved = { kind: "fail" };
    try {
      const res = await fetch("/api/" + action, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Wardfs-Token": token },
        body: JSON.stringify(body),
      });
      const answer = await res.json().catch(() => ({ message: "HTTP " + res.status }));
      if (res.ok) {
        const troubled = action === "restore" && answer.conflicts.length > 0;
        saved = { kind: troubled ? "warn" : "ok", text: describe(action, body.pr, answer) };
        if (action === "restore") saved.restore = answer;
      } else {
        saved.text = NAMES[action] + " of " + (action === "restore" ? "checkpoint #" : "") + id +
          " failed: " + (answer.code ? answer.code + ": " : "") + answer.message;
      }
    } catch (e) {
      saved.text = "The review server did not answer: " + e;
    }
    sessionStorage.setItem("wardfs-flash", JSON.stringify(saved));
    window.location.reload();
  }

  // Shows the diff between the checked "from" and "to" checkpoints (or now).
  function compare() {
    const picked = (name) => {
      const input = document.querySelector("input[name=" + name + "]:checked");
      return input ? input.value : null;
    };
    const from = picked("from");
    if (from === null) {
      show("fail", "Pick the checkpoint to compare from (a \"from\" button).");
      return;
    }
    const url = new URL(window.location.href);
    url.searchParams.set("from", from);
    url.searchParams.set("to", picked("to") || "now");
    url.hash = "diff";
    window.location.assign(url.toString());
  }

  // "just now", "3 min ago", "5 h ago", or the local date and time past a day.
  function when(ms, now) {
    const s = Math.round((now - ms) / 1000);
    if (s < -60 || s >= 86400) {
      return new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
    }
    if (s < 60) return "just now";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    return Math.floor(s / 3600) + " h ago";
  }

  function showTimes() {
    const now = Date.now();
    for (const t of document.querySelectorAll("time.when")) {
      const ms = Date.parse(t.dateTime);
      if (!Number.isNaN(ms)) t.textContent = when(ms, now);
    }
  }
  showTimes();
  setInterval(showTimes, 30000);

  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (button) act(button);
    else if (ev.target.closest("#compare")) compare();
  });
})();
