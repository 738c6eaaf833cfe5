/**
 * The admin page's view of the feed's consumers (`Feed`): each consumer, how far behind it is
 * (readable now, held by the horizon), and what holds the horizon back. Same rules as
 * views.ts: every value escaped.
 */
import * as Feed from "@effect-durable/pg/Feed"
import { describeHolder } from "../diagnostics.js"
import { html } from "./html.js"
import { layout, num, time, type ViewContext } from "./views.js"

const capped = (n: number) => n >= Feed.LAG_CAP ? html`<td class="num">${Feed.LAG_CAP}+</td>` : num(n)

export const feedsPage = (
  ctx: ViewContext,
  consumers: ReadonlyArray<Feed.FeedLag>,
  holder: Feed.HorizonHolder | null
) =>
  layout(
    ctx,
    "feeds",
    "Feeds",
    html`<h1>Feeds</h1>
<p class="note">Named consumers of the outbox's messages in commit order, each at its own position. Readable: what it can read now; held: committed past the horizon, waiting for an older writing transaction to end.</p>
<p id="horizon" class="note">${
      holder === null
        ? "Horizon: no transaction holds it back."
        : html`Horizon held by ${describeHolder(holder)}: no consumer reads past it until it ends.`
    }</p>
${
      consumers.length === 0
        ? html`<p class="note">No feed consumers.</p>`
        : html`<table id="feeds"><thead><tr><th>Consumer</th><th>Topics</th><th class="num">Read</th><th class="num">Readable</th><th class="num">Held</th><th>Last read</th><th>Position</th></tr></thead><tbody>${
          consumers.map((c) =>
            html`<tr data-consumer="${c.name}"><td>${c.name}</td><td>${c.topics.join(", ")}</td>${num(c.read)}${
              capped(c.readable)
            }${capped(c.held)}<td>${time(c.readAt)}</td><td><code>${c.position}/${c.lastId}</code></td></tr>`
          )
        }</tbody></table>`
    }`
  )
