/**
 * The page's only assets, served by the page itself: one stylesheet and one script (no
 * framework, no external font or CDN: it works with no network). The script refreshes the
 * overview, asks before every action, posts it as JSON and shows a bulk action's progress;
 * the schema's drift and checks are actions too (POST), their answer shown in place. Stored
 * names it shows (in a question, in its status line) have their control characters marked by
 * code point, as the page's HTML does: a bidi override cannot reorder what is asked.
 */
import { INVISIBLE } from "@effect-durable/core/Printable"

/** What the script marks: what the page's HTML marks, and the line breaks and tabs a dialog would lay out. */
const CONTROL_SOURCE = JSON.stringify(`[\\t\\n\\r]|${INVISIBLE.source}`)

export const css = `
:root { color-scheme: light; --fg: #1f2933; --muted: #616e7c; --line: #d9e2ec; --bg: #f5f7fa; --accent: #2563eb;
  --danger: #b91c1c; --ok: #047857; --warn: #b45309; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 1.5rem; padding: .6rem 1.2rem; background: #102a43; color: #f0f4f8; flex-wrap: wrap; }
header strong { font-size: 1.05rem; letter-spacing: .02em; }
header nav a { color: #bcccdc; text-decoration: none; margin-right: 1rem; }
header nav a.current, header nav a:hover { color: #fff; }
header .meta { margin-left: auto; color: #9fb3c8; font-size: .85rem; }
main { padding: 1rem 1.2rem 3rem; max-width: 1280px; }
h1 { font-size: 1.25rem; margin: .4rem 0 1rem; }
h2 { font-size: 1.05rem; margin: 1.6rem 0 .6rem; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #f0f4f8; font-weight: 600; font-size: .8rem; text-transform: uppercase; letter-spacing: .03em; color: var(--muted); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.acted td { opacity: .55; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .85rem; }
pre { background: #fff; border: 1px solid var(--line); padding: .6rem; overflow: auto; max-height: 24rem; }
a { color: var(--accent); }
.badge { display: inline-block; padding: 0 .45rem; border-radius: .6rem; font-size: .75rem; font-weight: 600; background: #e4e7eb; }
.badge.dead, .badge.paused { background: #fde2e2; color: var(--danger); }
.badge.cancelled { background: #ececec; color: #555; text-decoration: line-through; }
.badge.ready { background: #dcfce7; color: var(--ok); }
.badge.claimed, .badge.delayed { background: #fef3c7; color: var(--warn); }
.badge.projected, .badge.complete { background: #e0e7ff; color: #3730a3; }
.badge.running, .badge.pending, .badge.interrupting { background: #fef3c7; color: var(--warn); }
.badge.suspended { background: #dcfce7; color: var(--ok); }
button, .button { font: inherit; padding: .25rem .7rem; border: 1px solid #9fb3c8; border-radius: .3rem; background: #fff; cursor: pointer; color: var(--fg); text-decoration: none; }
button:hover { background: #f0f4f8; }
button.danger { border-color: #f5a3a3; color: var(--danger); }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
.actions { display: flex; gap: .5rem; flex-wrap: wrap; margin: .6rem 0; align-items: center; }
form.filter { display: flex; flex-wrap: wrap; gap: .5rem .8rem; align-items: end; background: #fff; border: 1px solid var(--line); padding: .7rem; margin-bottom: .8rem; }
form.filter label { display: flex; flex-direction: column; font-size: .75rem; color: var(--muted); gap: .15rem; }
input, select { font: inherit; padding: .25rem .4rem; border: 1px solid #bcccdc; border-radius: .25rem; background: #fff; }
input.wide { width: 16rem; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: .8rem; }
.card { background: #fff; border: 1px solid var(--line); padding: .6rem .7rem; }
.card h3 { margin: 0 0 .3rem; font-size: .95rem; display: flex; justify-content: space-between; align-items: center; gap: .5rem; }
.card .figures { color: var(--muted); font-size: .8rem; margin-bottom: .2rem; }
.legend { color: var(--muted); font-size: .75rem; }
.legend i { display: inline-block; width: .8rem; height: .25rem; margin: 0 .25rem .15rem .6rem; vertical-align: middle; }
.legend i.ready { background: var(--accent); } .legend i.dead { background: var(--danger); }
.legend i.delivered { background: #9bb7e4; height: .6rem; } .legend i.lag { background: #d97706; }
svg.chart { display: block; width: 100%; height: auto; }
svg.chart .delivered { fill: #c3d5f2; } svg.chart .died { fill: var(--danger); }
svg.chart .ready { fill: none; stroke: var(--accent); stroke-width: 1.6; } svg.chart circle.ready { fill: var(--accent); }
svg.chart .dead { fill: none; stroke: var(--danger); stroke-width: 1.6; } svg.chart circle.dead { fill: var(--danger); }
svg.chart .lag { fill: none; stroke: #d97706; stroke-width: 1.4; } svg.chart circle.lag { fill: #d97706; }
svg.chart .base { stroke: var(--line); }
svg.chart text.axis { font-size: 9px; fill: var(--muted); }
.note { color: var(--muted); }
.banner { background: #fff4e5; border: 1px solid #f5c26b; padding: .5rem .8rem; margin-bottom: 1rem; }
.error { background: #fde2e2; border: 1px solid #f5a3a3; padding: .6rem .8rem; }
dl.fields { display: grid; grid-template-columns: 10rem 1fr; gap: .25rem 1rem; background: #fff; border: 1px solid var(--line); padding: .7rem; margin: 0; }
dl.fields dt { color: var(--muted); } dl.fields dd { margin: 0; word-break: break-word; }
#status { position: fixed; bottom: 1rem; right: 1rem; max-width: 28rem; padding: .5rem .8rem; background: #102a43; color: #fff; border-radius: .3rem; display: none; }
#status.shown { display: block; } #status.failed { background: var(--danger); }
#status progress { width: 100%; }
mark.control { background: #fde68a; color: #92400e; font: .75em ui-monospace, "DejaVu Sans Mono", monospace; padding: 0 .15em; border-radius: .2em; }
.check-ok { color: var(--ok); font-weight: 600; } .check-warn { color: var(--warn); font-weight: 600; } .check-fail { color: var(--danger); font-weight: 600; }
`

export const js = `"use strict";
(function () {
  var body = document.body;
  var base = body.getAttribute("data-base") || "";
  var status = document.getElementById("status");

  // Every control character in text the script shows (a stored name, an error): by its code point.
  var CONTROL = new RegExp(${CONTROL_SOURCE}, "g");
  function codePoint(c) { return "U+" + ("000" + c.charCodeAt(0).toString(16).toUpperCase()).slice(-4); }
  function marked(text) {
    return String(text).replace(CONTROL, function (c) { return "[" + codePoint(c) + "]"; });
  }
  function ask(question) { return window.confirm(marked(question)); }

  function say(text, failed, progress) {
    // Marked as the page marks them: <mark class="control">U+202E</mark> where each one is.
    status.textContent = "";
    String(text).split(new RegExp("(" + CONTROL.source + ")")).forEach(function (part, i) {
      if (i % 2 === 0) { status.appendChild(document.createTextNode(part)); return; }
      var mark = document.createElement("mark");
      mark.className = "control";
      mark.title = "an invisible control character";
      mark.textContent = codePoint(part);
      status.appendChild(mark);
    });
    if (progress) {
      var bar = document.createElement("progress");
      bar.max = progress.total || 1;
      bar.value = progress.done;
      status.appendChild(bar);
    }
    status.className = "shown" + (failed ? " failed" : "");
  }

  function request(method, path, payload) {
    var init = { method: method, credentials: "same-origin", headers: { accept: "application/json" } };
    if (payload !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    return fetch(base + path, init).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) throw new Error(data.error || response.status + " " + response.statusText);
        return data;
      });
    });
  }

  function number(n) { return Number(n).toLocaleString("en-US"); }

  // The overview refreshes itself until paused (or while the tab is hidden).
  var live = document.querySelector("[data-refresh]");
  var paused = false;
  function refresh() {
    if (!live) return Promise.resolve();
    return fetch(live.getAttribute("data-refresh"), { credentials: "same-origin" }).then(function (response) {
      if (response.ok) return response.text().then(function (text) { live.innerHTML = text; });
    }).catch(function () {});
  }
  if (live) {
    setInterval(function () { if (!paused && !document.hidden) refresh(); }, Number(live.getAttribute("data-interval") || 5000));
  }

  function selectedIds() {
    return Array.prototype.map.call(document.querySelectorAll("input[name=select]:checked"), function (box) { return box.value; });
  }

  function markRows(ids, state) {
    ids.forEach(function (id) {
      var row = document.querySelector("tr[data-row-id='" + id + "']");
      if (!row) return;
      row.classList.add("acted");
      var cell = row.querySelector(".state");
      if (cell) cell.textContent = state;
      var box = row.querySelector("input[name=select]");
      if (box) { box.checked = false; box.disabled = true; }
    });
  }

  var PAST = { redrive: "redriven", discard: "discarded", "retry-now": "retried now", "move-aside": "moved aside", cancel: "cancelled", restore: "restored" };
  var AFTER = { redrive: "ready", discard: "discarded", "retry-now": "ready", "move-aside": "dead", cancel: "cancelled", restore: "ready" };
  var NOT = { redrive: "not dead, or a dedup key an open message holds", discard: "not dead or cancelled", "retry-now": "not waiting for a retry", "move-aside": "not ready or delayed", cancel: "done, dead or cancelled already", restore: "not cancelled, or a dedup key an open message holds" };

  function pollJob(verb, id) {
    return request("GET", "/api/jobs/" + encodeURIComponent(id)).then(function (job) {
      if (job.state === "running") {
        say(verb + ": " + number(job.done) + " / " + number(job.total), false, job);
        return new Promise(function (resolve) { setTimeout(resolve, 250); }).then(function () { return pollJob(verb, id); });
      }
      if (job.state === "failed") throw new Error(verb + " stopped after " + number(job.done) + ": " + job.error);
      say(PAST[verb] + " " + number(job.done) + " of " + number(job.total) + " (" + job.state + ")", false, job);
      return job;
    });
  }

  function act(button) {
    var action = button.getAttribute("data-action");
    var scope = button.getAttribute("data-scope");
    if (action === "pause" || action === "resume") {
      var topic = button.getAttribute("data-topic");
      if (!ask(action[0].toUpperCase() + action.slice(1) + " topic " + topic + "?")) return;
      return request("POST", "/actions/" + action, { topic: topic }).then(function (result) {
        say((action === "pause" ? "paused " : "resumed ") + topic + (result.changed ? "" : " (no change)"));
        return refresh();
      });
    }
    if (action === "drift" || action === "checks") {
      say(action === "drift" ? "comparing with the migrations..." : "running the checks...");
      return request("POST", "/schema/" + action, {}).then(function (result) {
        document.getElementById(action + "-result").innerHTML = result.html;
        say(action === "drift" ? "compared with the migrations" : "checks done");
      });
    }
    if (action === "schedule-pause" || action === "schedule-resume") {
      var scheduleVerb = action.replace("schedule-", "");
      var schedule = button.getAttribute("data-schedule");
      if (scheduleVerb === "pause" && !ask("Pause schedule " + schedule + "? Its slots are missed until it is resumed.")) return;
      return request("POST", "/schedules/actions/" + scheduleVerb, { name: schedule }).then(function (result) {
        say(result.changed
          ? (scheduleVerb === "pause" ? "paused schedule " : "resumed schedule ") + schedule
          : "schedule " + schedule + (scheduleVerb === "pause" ? " was not running" : " was not paused"));
        if (result.changed) {
          var state = button.closest("tr").querySelector(".state");
          if (state) state.textContent = scheduleVerb === "pause" ? "paused" : "running";
          button.remove();
        }
      });
    }
    // A limit form's field (a row's, or the new-limit form's) and a count field's value (empty: none).
    var limitField = function (name) {
      var input = (button.closest("tr") || button.closest(".limit-new")).querySelector("input[name=" + name + "]");
      return input ? input.value.trim() : "";
    };
    var asLimit = function (text) { return text === "" ? null : Number(text); };
    if (action === "limit-set" || action === "limit-clear") {
      var limitTopic = button.getAttribute("data-topic") || limitField("topic");
      if (limitTopic === "") { say("name the topic first", true); return; }
      if (action === "limit-clear") {
        if (!ask("Clear every limit of topic " + limitTopic + "?")) return;
        return request("POST", "/limits/actions/clear", { topic: limitTopic }).then(function (result) {
          say(result.changed ? "cleared the limits of " + limitTopic : limitTopic + " had no limits");
          window.location.reload();
        });
      }
      return request("POST", "/limits/actions/set", {
        topic: limitTopic, maxInFlight: asLimit(limitField("max")), groupMaxInFlight: asLimit(limitField("group-max")),
        rate: limitField("rate") || null, burst: asLimit(limitField("burst")),
        groupRate: limitField("group-rate") || null, groupBurst: asLimit(limitField("group-burst"))
      }).then(function () {
        say("set the limits of " + limitTopic);
        window.location.reload();
      });
    }
    if (action === "inbox-limit-set" || action === "inbox-limit-clear") {
      var consumer = button.getAttribute("data-consumer") || limitField("consumer");
      if (consumer === "") { say("name the consumer first", true); return; }
      if (action === "inbox-limit-clear") {
        if (!ask("Clear the limits of inbox consumer " + consumer + "?")) return;
        return request("POST", "/limits/actions/inbox-clear", { consumer: consumer }).then(function (result) {
          say(result.changed ? "cleared the limits of inbox consumer " + consumer : consumer + " had no limits");
          window.location.reload();
        });
      }
      return request("POST", "/limits/actions/inbox-set", {
        consumer: consumer, maxInFlight: asLimit(limitField("max")),
        rate: limitField("rate") || null, burst: asLimit(limitField("burst"))
      }).then(function () {
        say("set the limits of inbox consumer " + consumer);
        window.location.reload();
      });
    }
    if (action === "workflow-interrupt" || action === "workflow-resume") {
      var workflowVerb = action.replace("workflow-", "");
      var execution = { workflow: button.getAttribute("data-workflow"), executionId: button.getAttribute("data-execution") };
      var named = execution.workflow + " execution " + execution.executionId;
      if (workflowVerb === "interrupt" && !ask("Interrupt " + named + "? Its compensations run and it ends interrupted.")) return;
      return request("POST", "/workflows/actions/" + workflowVerb, execution).then(function (result) {
        say(result.changed
          ? (workflowVerb === "interrupt" ? "interrupt requested for " : "resumed ") + named
          : named + (workflowVerb === "interrupt" ? " is complete: nothing to interrupt" : " is not suspended: nothing to resume"));
        if (result.changed) button.remove();
      });
    }
    var verb = action.replace("inbox-", "");
    var path = action.indexOf("inbox-") === 0 ? "/inbox/actions/" + verb : "/actions/" + verb;
    var consumer = button.getAttribute("data-consumer");
    if (scope === "matching") {
      var query = button.getAttribute("data-filter") || "";
      return request("GET", "/api/count?" + query).then(function (count) {
        if (count.count === 0) { say("no dead message matches this filter"); return; }
        if (!ask(verb[0].toUpperCase() + verb.slice(1) + " all " + number(count.count) + " dead messages matching this filter?")) return;
        return request("POST", path, { filter: query, upTo: count.maxId, expected: count.count }).then(function (started) {
          say(verb + ": 0 / " + number(count.count), false, { done: 0, total: count.count });
          return pollJob(verb, started.job);
        });
      });
    }
    var ids = scope === "one" ? [button.getAttribute("data-id")] : selectedIds();
    if (ids.length === 0) { say("select messages first"); return; }
    var what = ids.length === 1 ? "message " + ids[0] : ids.length + " selected messages";
    var payload = consumer ? { consumer: consumer, ids: ids } : { ids: ids };
    if (verb === "move-aside") {
      // Moved aside with a reason, recorded in the message's last error.
      var reason = window.prompt(marked("Move " + what + " aside to the dead letters? Why (recorded with it):"), "");
      if (reason === null) return;
      if (reason.trim() === "") { say("a reason is needed to move a message aside", true); return; }
      payload.reason = reason;
    } else if (verb !== "retry-now" && !ask(verb[0].toUpperCase() + verb.slice(1) + " " + what + "?")) return;
    return request("POST", path, payload).then(function (result) {
      say(PAST[verb] + " " + number(result.ids.length) + (result.ids.length < ids.length ? " (the others were " + NOT[verb] + ")" : ""));
      markRows(result.ids, AFTER[verb]);
      var badge = document.querySelector("h1 .badge");
      if (scope === "one" && result.ids.length === 1 && badge) { badge.textContent = AFTER[verb]; badge.className = "badge " + AFTER[verb]; }
    });
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (target && target.id === "refresh-toggle") {
      paused = !paused;
      target.textContent = paused ? "Resume refresh" : "Pause refresh";
      return;
    }
    var button = target && target.closest ? target.closest("button[data-action]") : null;
    if (!button) return;
    event.preventDefault();
    button.disabled = true;
    Promise.resolve().then(function () { return act(button); }).catch(function (error) {
      say(error.message, true);
    }).then(function () { button.disabled = false; });
  });

  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "select-all") {
      Array.prototype.forEach.call(document.querySelectorAll("input[name=select]:not(:disabled)"), function (box) {
        box.checked = event.target.checked;
      });
    }
  });
})();
`
