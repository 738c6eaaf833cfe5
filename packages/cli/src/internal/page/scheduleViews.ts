/**
 * The admin page's view of the cron schedules (`Schedules`): each schedule, its next slot and
 * its slots by outcome, with Pause and Resume. Same rules as views.ts: every value escaped.
 */
import type * as Schedules from "@effect-durable/pg/Schedules"
import { html } from "./html.js"
import { badge, layout, num, time, type ViewContext } from "./views.js"

const actions = (ctx: ViewContext, s: Schedules.ScheduleInfo) =>
  ctx.readOnly
    ? ""
    : s.paused
    ? html`<button data-action="schedule-resume" data-schedule="${s.name}">Resume</button>`
    : html`<button data-action="schedule-pause" data-schedule="${s.name}">Pause</button>`

export const schedulesPage = (ctx: ViewContext, schedules: ReadonlyArray<Schedules.ScheduleInfo>) =>
  layout(
    ctx,
    "schedules",
    "Schedules",
    html`<h1>Schedules</h1>
<p class="note">Cron schedules: each slot enqueues one message on its topic, whichever process decides it. Skipped: the overlap policy held a slot back; missed: it passed while paused or before the catch-up window.</p>
${
      schedules.length === 0
        ? html`<p class="note">No schedules.</p>`
        : html`<table id="schedules"><thead><tr><th>Schedule</th><th>Cron</th><th>Topic</th><th>State</th><th>Next slot</th><th>Last slot</th><th>Overlap</th><th class="num">Enqueued</th><th class="num">Skipped</th><th class="num">Missed</th><th class="num">Backfilled</th>${
          ctx.readOnly ? "" : html`<th></th>`
        }</tr></thead><tbody>${
          schedules.map((s) =>
            html`<tr data-schedule="${s.name}"><td>${s.name}</td><td><code>${s.cron}</code> ${s.timeZone}</td><td>${s.topic}</td><td class="state">${
              badge(s.paused ? "paused" : "running")
            }${s.paused && s.pausedBy !== null ? html` by ${s.pausedBy}` : ""}</td><td>${
              s.paused ? "-" : time(s.nextSlot)
            }</td><td>${time(s.lastSlot)}</td><td>${s.overlap}</td>${num(s.enqueued)}${num(s.skipped)}${num(s.missed)}${
              num(s.backfilled)
            }${ctx.readOnly ? "" : html`<td class="actions">${actions(ctx, s)}</td>`}</tr>`
          )
        }</tbody></table>`
    }`
  )
