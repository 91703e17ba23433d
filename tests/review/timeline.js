// Drives the review page's timeline in headless Chromium for tests/review/timeline.rs.
//
// Environment: PLAYWRIGHT_CORE, CHROMIUM (as drive.js), REVIEW_URL (the URL `wardfs review`
// printed), OLD_ID and NEW_ID (two checkpoints of /workspace, the older first), API_PID (the
// test's own pid: its API writes), MOUNT_PID (the process that wrote through the mount),
// SCREENSHOT (where to save the PNG). Restores the older checkpoint (nothing changed since the
// newer one, which is named as its undo), then undoes that by restoring the files of the diff
// from the undo checkpoint to now. Prints one JSON line with the two undo checkpoints; exits
// non-zero, saying why, on any failure.
"use strict";

const assert = require("node:assert/strict");
const { env, launch, open, run, checkTimes, checkNoDiffHeaders } = require("./browser.js");

const url = env("REVIEW_URL");
const older = env("OLD_ID");
const newer = env("NEW_ID");
const apiPid = env("API_PID");
const mountPid = env("MOUNT_PID");
const screenshot = env("SCREENSHOT");

async function main() {
  const browser = await launch();
  try {
    const { page, problems } = await open(browser, () => false);
    const res = await page.goto(url.replace("/?", "/timeline?"));
    assert.equal(res.status(), 200);
    const cpOld = page.locator(`#checkpoint-${older}`);
    const cpNew = page.locator(`#checkpoint-${newer}`);
    await cpOld.waitFor();
    await cpNew.waitFor();
    // Newest first.
    const ids = await page.locator("li.checkpoint").evaluateAll((els) => els.map((e) => e.dataset.id));
    assert.deepEqual(ids, [newer, older]);
    assert.ok((await cpNew.locator(".cp-message").textContent()).includes("second <b>draft</b>"));
    assert.equal(await cpNew.locator(".cp-message b").count(), 0);
    assert.equal((await cpNew.locator(".origin").textContent()).trim(), `api pid ${apiPid}`);
    // When: relative to now, the exact time in UTC in the tooltip.
    const times = await checkTimes(page.locator("li.checkpoint .meta time.when"));
    assert.equal(times.length, 2, `${times}`);

    // Who changed what since the older checkpoint: the API, the mount, beside wardfs.
    const group = (via, pid) =>
      cpNew.locator(`li.who-group[data-via="${via}"][data-pid="${pid}"]`);
    const api = await group("api", apiPid).textContent();
    assert.ok(api.includes(`api pid ${apiPid}`) && api.includes("/workspace/notes.md"), api);
    const fuse = await group("fuse", mountPid).textContent();
    assert.ok(fuse.includes(`fuse pid ${mountPid}`) && fuse.includes("/workspace/from-mount.txt"), fuse);
    const beside = await group("watcher", "").textContent();
    assert.ok(beside.includes("/workspace/beside.txt"), beside);
    const summary = await cpNew.locator(".changes .summary").textContent();
    assert.ok(summary.includes(`since #${older}`), summary);

    // A hostile name and content stay text.
    await cpNew.getByText('/workspace/<img src=x onerror="window.__pwned=3">.md').first().waitFor();
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.locator("img").count(), 0);

    // Pick the two checkpoints and compare them.
    await cpOld.locator('input[name="from"]').check();
    await cpNew.locator('input[name="to"]').check();
    await page.click("#compare");
    await page.waitForURL(new RegExp(`from=${older}&to=${newer}`));
    const diff = page.locator("#diff");
    await diff.locator('details.file[data-path="/workspace/notes.md"]').waitFor();
    await diff.locator("td.code.add", { hasText: "second" }).first().waitFor();
    await diff.locator("td.code.del", { hasText: "first" }).first().waitFor();
    await diff.getByText("<script>window.__pwned = 4</script>").first().waitFor();
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.locator("img").count(), 0);
    // The files' git header lines are not diff lines.
    await checkNoDiffHeaders(diff);
    await page.screenshot({ path: screenshot, fullPage: true });

    // The same change in the unified view (the parameters are kept).
    await page.click("#view-toggle");
    await page.waitForURL(/view=unified/);
    assert.ok(page.url().includes(`from=${older}`), page.url());
    await page.locator("#diff tr.add td.code", { hasText: "second" }).first().waitFor();
    await checkNoDiffHeaders(page.locator("#diff"));

    // Restore the older checkpoint, the whole zone, through its button (confirmed).
    await cpOld.locator("button.restore").click();
    const hint = page.locator("#undo-hint");
    await hint.waitFor({ timeout: 60000 });
    const flash = await page.locator("#flash").textContent();
    assert.ok(flash.includes(`Restored checkpoint #${older}`), flash);
    const before = (await hint.textContent()).match(/#(\d+)/)[1];
    // Nothing changed since the newer checkpoint: it holds the present, no other was made, and
    // it is marked as the undo.
    assert.equal(before, newer, "the newer checkpoint undoes the restore");
    const undo = page.locator(`#checkpoint-${before}`);
    await undo.waitFor();
    assert.ok(await undo.evaluate((e) => e.classList.contains("undo")));
    const listed = await page.locator("li.checkpoint").evaluateAll((els) => els.map((e) => e.dataset.id));
    assert.deepEqual(listed, [newer, older], "no checkpoint of an unchanged zone");
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await page.screenshot({ path: screenshot.replace(/\.png$/, "-restored.png"), fullPage: true });

    // Undo it: the diff from the undo checkpoint to now, then restore just the files it lists.
    await undo.locator("a.diff-now").click();
    await page.waitForURL(new RegExp(`from=${before}&to=now`));
    await page.locator('#diff details.file[data-path="/workspace/notes.md"]').waitFor();
    const files = await page.locator("#diff details.file").count();
    await page.click("#diff button.restore-files");
    const again = page.locator("#flash", { hasText: `Restored checkpoint #${before}` });
    await again.waitFor({ timeout: 60000 });
    const undoneBy = (await page.locator("#undo-hint").textContent()).match(/#(\d+)/)[1];
    await page.locator(`#checkpoint-${undoneBy}.undo`).waitFor();

    assert.deepEqual(problems, []);
    console.log(JSON.stringify({ ok: true, before: Number(before), undone_by: Number(undoneBy), files, flash }));
  } finally {
    await browser.close();
  }
}

run(main);
