// Drives the review page's staged commits in headless Chromium for tests/review/mod.rs.
//
// Environment: PLAYWRIGHT_CORE (the playwright-core module directory), CHROMIUM (the browser),
// REVIEW_URL (the URL `wardfs review` printed), KEEP_ID (the commit to push), DROP_ID (the commit
// to discard), BLOCKED_ID (a commit the git server refuses), SCREENSHOT (where to save the PNG). Exits non-zero, saying why, on any failure.
"use strict";

const assert = require("node:assert/strict");
const { env, launch, open, run } = require("./browser.js");

const url = env("REVIEW_URL");
const keep = env("KEEP_ID");
const drop = env("DROP_ID");
const blocked = env("BLOCKED_ID");
const screenshot = env("SCREENSHOT");

async function main() {
  const browser = await launch();
  try {
    // The refused push answers 409 on purpose; Chromium logs every failed fetch.
    const { page, problems } = await open(browser, (text) => text.includes("status of 409"));

    const res = await page.goto(url);
    assert.equal(res.status(), 200);
    const kept = page.locator(`#commit-${keep}`);
    const dropped = page.locator(`#commit-${drop}`);
    await kept.waitFor();
    await dropped.waitFor();

    // A diff is shown: the changed line, with the changed words marked (side by side).
    await kept.locator("td.code.add", { hasText: '"hello, review page"' }).first().waitFor();
    await kept.locator("td.code.del", { hasText: '"hello, world"' }).first().waitFor();
    const inserted = await kept.locator("ins.word").allTextContents();
    assert.ok(inserted.some((t) => t.includes("review")), `word diff marks: ${inserted}`);
    assert.ok(await kept.getByText("Greet the review page").isVisible());

    // File content is text, never markup.
    await dropped.getByText("<script>window.__pwned = 1</script>").first().waitFor();
    await dropped.getByText('<img src=x onerror="window.__pwned = 2">').first().waitFor();
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.locator("img").count(), 0);

    await page.screenshot({ path: screenshot, fullPage: true });

    // The unified view shows the same change.
    await page.click("#view-toggle");
    await page.waitForURL(/view=unified/);
    await page
      .locator(`#commit-${keep} tr.add td.code`, { hasText: '"hello, review page"' })
      .first()
      .waitFor();

    // Discard one commit: it leaves the list and shows as discarded.
    await page.click(`#commit-${drop} button.discard`);
    await page.locator(`#done-${drop}[data-state="discarded"]`).waitFor();
    assert.equal(await page.locator(`#commit-${drop}`).count(), 0);
    const flash1 = await page.locator("#flash").textContent();
    assert.ok(flash1.includes(`Discarded ${drop}`), `flash: ${flash1}`);

    // A refused push: the commit stays, marked rejected, and says why (as text).
    await page.click(`#commit-${blocked} button.push`);
    await page.locator(`#commit-${blocked}[data-state="rejected"]`).waitFor({ timeout: 60000 });
    const why = await page.locator(`#why-${blocked} .reason`).textContent();
    assert.ok(why.includes("README.md is <b>frozen</b>"), `why: ${why}`);
    assert.equal(await page.locator(`#why-${blocked} b`).count(), 0);
    const flash0 = await page.locator("#flash").textContent();
    assert.ok(flash0.includes(`Push of ${blocked} failed`), `flash: ${flash0}`);
    assert.equal(await page.locator(`#commit-${blocked} button.push`).count(), 1, "can push again");

    // Push the other to its branch.
    await page.click(`#commit-${keep} button.push`);
    await page.locator(`#done-${keep}[data-state="pushed"]`).waitFor({ timeout: 60000 });
    const flash2 = await page.locator("#flash").textContent();
    assert.ok(flash2.includes(`Pushed ${keep}`), `flash: ${flash2}`);
    assert.equal(await page.locator("section.commit").count(), 1, "only the refused one is left");
    await page.screenshot({ path: screenshot.replace(/\.png$/, "-done.png"), fullPage: true });

    assert.deepEqual(problems, []);
    console.log(JSON.stringify({ ok: true, discarded: drop, pushed: keep, rejected: blocked, why, flash: [flash0, flash1, flash2] }));
  } finally {
    await browser.close();
  }
}

run(main);
