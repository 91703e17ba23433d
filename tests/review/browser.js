// What the review page's browser scenarios share (drive.js, timeline.js): the environment they
// read and headless Chromium started for this machine's closed network.
"use strict";

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
/// wanted) into the returned `problems`, and accepts every dialog.
async function open(browser, expected) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(30000);
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !expected(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("dialog", (d) => d.accept());
  return { page, problems };
}

/// Runs `main`, printing any failure and exiting non-zero.
function run(main) {
  main().catch((e) => {
    console.error(e && e.stack ? e.stack : String(e));
    process.exit(1);
  });
}

module.exports = { env, launch, open, run };
