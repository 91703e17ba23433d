// The review page's buttons: push (to the branch or as a pull request) and discard.
// Each action is a same-origin POST with the page's token in a header; the answer is shown as
// text (never as HTML), kept across the reload that shows the commit's new state.
"use strict";

(function () {
  const token = document.body.dataset.token;
  const flash = document.getElementById("flash");

  function show(kind, text) {
    flash.hidden = false;
    flash.className = kind;
    flash.textContent = text;
  }

  const saved = sessionStorage.getItem("sandfs-flash");
  if (saved) {
    sessionStorage.removeItem("sandfs-flash");
    try {
      const f = JSON.parse(saved);
      show(f.kind, f.text);
    } catch (_) { /* ignore a damaged message */ }
  }

  function describe(action, pr, answer) {
    if (action === "discard") {
      let text = "Discarded " + answer.id + ".";
      for (const p of answer.reverted || []) text += " Reverted " + p + ".";
      for (const k of answer.kept || []) text += " Kept " + k.path + ": " + k.reason + ".";
      return text;
    }
    let text = "Pushed " + answer.id + " as " + String(answer.commit_sha).slice(0, 12) +
      " to " + answer.pushed_ref + (answer.rebased ? " (rebased onto the moved branch)" : "") + ".";
    if (pr && answer.url) text += " Pull request: " + answer.url;
    return text;
  }

  async function act(button) {
    const action = button.dataset.action;
    const id = button.dataset.id;
    const pr = button.dataset.pr === "true";
    if (action === "discard" && !window.confirm("Discard staged commit " + id + "?")) return;
    const card = document.getElementById("commit-" + id);
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    const busy = document.getElementById("busy-" + id);
    busy.hidden = false;
    busy.textContent = action === "push" ? "pushing…" : "discarding…";
    const body = action === "push" ? { id: id, pr: pr } : { id: id };
    let kind = "fail";
    let text;
    try {
      const res = await fetch("/api/" + action, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Sandfs-Token": token },
        body: JSON.stringify(body),
      });
      const answer = await res.json().catch(() => ({ message: "HTTP " + res.status }));
      if (res.ok) {
        kind = "ok";
        text = describe(action, pr, answer);
      } else {
        text = (action === "push" ? "Push" : "Discard") + " of " + id + " failed: " +
          (answer.code ? answer.code + ": " : "") + answer.message;
      }
    } catch (e) {
      text = "The review server did not answer: " + e;
    }
    sessionStorage.setItem("sandfs-flash", JSON.stringify({ kind: kind, text: text }));
    window.location.reload();
  }

  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (button) act(button);
  });
})();
