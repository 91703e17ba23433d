// What the review page's browser scenarios share (drive.js, timeline.js): the environment they
// read, headless Chromium started for this machine's closed network, the page's dialogs answered
// as a scenario says, and checks of what every page shows (times, diffs).
"use strict";

const assert = require("node:assert/strict");

/// Returns the environment variable `name`, failing loudly when it is not set.
function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

// The flags for Chromium on this machine's closed network (see the env notes): no sandbox as
// root, no GPU, and none of the background connections that would be refused.
const ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/// Starts headless Chromium (CHROMIUM) through playwright-core (PLAYWRIGHT_CORE).
async function launch() {
  const { chromium } = require(env("PLAYWRIGHT_CORE"));
  return chromium.launch({
    executablePath: env("CHROMIUM"),
    headless: true,
    args: ARGS,
    timeout: 60000,
  });
}

/// Opens a page that collects page errors and console errors (but those `expected` says are
/// wanted) into the returned `problems`. Every dialog's message goes into `dialogs`; a dialog is
/// answered by the first of `answers` (true: OK, false: Cancel), taken off it, or accepted when
/// `answers` is empty.
async function open(browser, expected) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(30000);
  const problems = [];
  const dialogs = [];
  const answers = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !expected(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    const yes = answers.length === 0 ? true : answers.shift();
    (yes ? d.accept() : d.dismiss()).catch((e) => problems.push(`dialog: ${e.message}`));
  });
  return { page, problems, dialogs, answers };
}

const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;

/// Checks that each of `times` (a locator of <time> elements, at least one) shows a time relative
/// to now (they are all recent), not the UTC stamp, and has the exact time in UTC as its tooltip.
/// Returns what they show.
async function checkTimes(times) {
  const seen = await times.evaluateAll((els) =>
    els.map((e) => ({ text: e.textContent, title: e.title, datetime: e.dateTime })));
  assert.ok(seen.length > 0, "no time shown");
  for (const t of seen) {
    assert.match(t.datetime, ISO_UTC, JSON.stringify(t));
    assert.equal(t.title, `${t.datetime} (UTC)`, JSON.stringify(t));
    assert.match(t.text, /^(just now|\d+ min ago)$/, JSON.stringify(t));
    const age = Date.now() - Date.parse(t.datetime);
    assert.ok(age > -60000 && age < 3600000, `${JSON.stringify(t)} is ${age} ms old`);
  }
  return seen.map((t) => t.text);
}

/// Checks that no diff line under `scope` is one of git's file header lines: the file's own
/// header names the file.
async function checkNoDiffHeaders(scope) {
  const lines = await scope.locator("table.diff tr").allTextContents();
  assert.ok(lines.length > 0, "no diff shown");
  const header = /diff --git |index [0-9a-f]+\.\.[0-9a-f]+|--- (a\/|\/dev\/null)|\+\+\+ (b\/|\/dev\/null)/;
  const headers = lines.filter((l) => header.test(l));
  assert.deepEqual(headers, [], "git header lines shown as diff lines");
  assert.equal(await scope.locator("tr.meta-line").count(), 0);
}

/// Runs `main`, printing any failure and exiting non-zero.
function run(main) {
  main().catch((e) => {
    console.error(e && e.stack ? e.stack : String(e));
    process.exit(1);
  });
}

module.exports = { env, launch, open, run, checkTimes, checkNoDiffHeaders };
