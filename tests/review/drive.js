// Drives the review page's staged commits in headless Chromium for tests/review/mod.rs.
//
// Environment: PLAYWRIGHT_CORE (the playwright-core module directory), CHROMIUM (the browser),
// REVIEW_URL (the URL `wardfs review` printed), REMOTE (the URL the commits go to), KEEP_ID (the
// commit to push), DROP_ID (the commit to discard), BLOCKED_ID (a commit the git server refuses),
// SCREENSHOT (where to save the PNG). Every push is confirmed in a dialog naming the branch and
// the remote; one is cancelled first, which must send nothing. Exits non-zero, saying why, on any
// failure.
"use strict";

const assert = require("node:assert/strict");
const { env, launch, open, run, checkTimes, checkNoDiffHeaders } = require("./browser.js");

const url = env("REVIEW_URL");
const remote = env("REMOTE");
const keep = env("KEEP_ID");
const drop = env("DROP_ID");
const blocked = env("BLOCKED_ID");
const screenshot = env("SCREENSHOT");

async function main() {
  const browser = await launch();
  try {
    // The refused push answers 409 on purpose; Chromium logs every failed fetch.
    const { page, problems, dialogs, answers } =
      await open(browser, (text) => text.includes("status of 409"));
    // Every POST the page sends, by path.
    const posts = [];
    page.on("request", (r) => {
      if (r.method() === "POST") posts.push(new URL(r.url()).pathname);
    });

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
    // The files' git header lines are not diff lines.
    await checkNoDiffHeaders(page.locator("section.commit"));
    // When each was staged: relative to now, the exact time in UTC in the tooltip.
    const staged = await checkTimes(page.locator("section.commit .meta time.when"));
    assert.equal(staged.length, 3, `${staged}`);
    // No push is the primary, filled button: the one to the shared branch is marked as risky.
    const pushLook = await kept.locator("button.push").evaluate((b) => {
      const s = getComputedStyle(b);
      return { bg: s.backgroundColor, color: s.color };
    });
    const plain = await kept.locator("button.discard").evaluate((b) => getComputedStyle(b).backgroundColor);
    assert.equal(pushLook.bg, plain, `push looks like ${JSON.stringify(pushLook)}`);

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
    await checkNoDiffHeaders(page.locator("section.commit"));

    // Discard one commit: it leaves the list and shows as discarded.
    await page.click(`#commit-${drop} button.discard`);
    await page.locator(`#done-${drop}[data-state="discarded"]`).waitFor();
    assert.equal(await page.locator(`#commit-${drop}`).count(), 0);
    const flash1 = await page.locator("#flash").textContent();
    assert.ok(flash1.includes(`Discarded ${drop}`), `flash: ${flash1}`);
    await checkTimes(page.locator(`#done-${drop} time.when`));

    // A push asks first, naming the branch and the remote; cancelled, it sends nothing and the
    // commit stays staged.
    answers.push(false);
    const asked = dialogs.length;
    const flashBefore = await page.locator("#flash").textContent();
    await page.click(`#commit-${keep} button.push`);
    for (let i = 0; i < 100 && dialogs.length === asked; i++) await page.waitForTimeout(50);
    assert.equal(dialogs.length, asked + 1, "the push asked first");
    const question = dialogs[asked];
    assert.ok(question.includes(`Push staged commit ${keep}`) && question.includes("branch main") &&
      question.includes(remote), `confirmation: ${question}`);
    assert.ok(!posts.includes("/api/push"), `a cancelled push sent ${posts}`);
    assert.equal(await kept.locator("button.push").isEnabled(), true);
    assert.equal(await page.locator("#flash").textContent(), flashBefore, "nothing was done");
    await page.reload();
    await page.locator(`#commit-${keep}[data-state="staged"]`).waitFor();
    assert.ok(!posts.includes("/api/push"), `a cancelled push sent ${posts}`);

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

    // Both pushes that went were confirmed.
    assert.equal(dialogs.filter((q) => q.startsWith("Push staged commit")).length, 3, `${dialogs}`);
    assert.deepEqual(posts.filter((p) => p === "/api/push").length, 2, `${posts}`);

    assert.deepEqual(problems, []);
    console.log(JSON.stringify({ ok: true, discarded: drop, pushed: keep, rejected: blocked, why, flash: [flash0, flash1, flash2] }));
  } finally {
    await browser.close();
  }
}

run(main);
