// The embedded web UI in a real browser: Debian chromium driven by playwright-core.
// The UI's requests are intercepted (page.route) to add the TEST-ONLY brass_test_force
// field, forcing the Harmony headers (an analysis message, then the final channel);
// the final text itself is free generation by the real (random-weight) model, so it
// streams token by token. Saves a screenshot to $BRASS_WEBUI_SCREENSHOT (docs/webui.png
// in the source tree when run through ctest).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { startServer, metrics } from "./lib.mjs";

let srv, browser;
before(async () => {
  srv = await startServer(["--test-hooks", "--ctx", "2048"]);
  // A fresh profile directory (playwright passes it as --user-data-dir).
  browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "brass-chromium-")), {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1200, height: 760 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--no-first-run"],
  });
});
after(async () => {
  await browser?.close();
  await srv?.stop();
});

const FORCE = "<|channel|>analysis<|message|>The user says hello. I should greet them back warmly.<|end|><|start|>assistant<|channel|>final<|message|>";

test("send a message, watch it stream, open the reasoning, stop a generation", async () => {
  const page = await browser.newPage();
  await page.route("**/v1/chat/completions", async (route) => {
    const body = JSON.parse(route.request().postData());
    body.brass_test_force = FORCE;
    await route.continue({ postData: JSON.stringify(body) });
  });
  await page.goto(srv.base + "/");
  await page.waitForFunction(() => document.getElementById("model").textContent === "builtin-tiny");
  await page.fill("#max_tokens", "60");
  await page.fill("#seed", "7");
  await page.fill("#input", "Hello brass!");
  await page.press("#input", "Enter");
  // Text streams: the answer grows over several observations.
  const answer = page.locator(".msg.assistant .content").last();
  const seen = new Set();
  for (let i = 0; i < 200 && seen.size < 3; i++) {
    seen.add(await answer.textContent());
    await page.waitForTimeout(15);
  }
  await page.waitForSelector(".msg.assistant[data-finish]");
  const finished = page.locator(".msg.assistant").last();
  assert.equal(await finished.getAttribute("data-finish"), "length");
  assert.ok((await answer.textContent()).length > 0);
  assert.ok(seen.size >= 2, "the answer should be seen growing while it streams");
  // Reasoning: collapsed, then opened.
  const details = finished.locator("details.reasoning");
  assert.equal(await details.isVisible(), true);
  assert.equal(await details.evaluate((d) => d.open), false);
  await details.locator("summary").click();
  assert.equal(await details.evaluate((d) => d.open), true);
  assert.match(await details.textContent(), /I should greet them back warmly/);
  assert.match(await page.textContent("#stats"), /tok\/s/);
  await page.screenshot({ path: process.env.BRASS_WEBUI_SCREENSHOT || join(tmpdir(), "brass-webui.png") });

  // Stop: a long generation, stopped from the UI; the server cancels it.
  const before = await metrics(srv.base);
  await page.fill("#max_tokens", "100000");
  await page.fill("#input", "Tell me a long story.");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant .content")[1]?.textContent.length > 20);
  await page.click("#stop");
  await page.waitForSelector(".msg.assistant:nth-of-type(4)[data-finish]");
  assert.equal(await page.locator(".msg.assistant").last().getAttribute("data-finish"), "stopped");
  for (let i = 0; i < 100; i++) {
    const m = await metrics(srv.base);
    if (m['brass_completions_finished_total{reason="cancelled"}'] > (before['brass_completions_finished_total{reason="cancelled"}'] ?? 0) &&
        m["brass_sequences_running"] === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail("the stopped generation was not cancelled on the server");
});
