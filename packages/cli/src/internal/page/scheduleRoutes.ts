/**
 * The cron schedules' routes: each schedule with its next slot and its slots by outcome, and
 * pause and resume of a schedule.
 */
import * as Schedules from "@effect-durable/pg/Schedules"
import * as Effect from "effect/Effect"
import type { Actions } from "./actions.js"
import { htmlResponse } from "./edge.js"
import { get, type Page, post } from "./route.js"
import * as ScheduleViews from "./scheduleViews.js"

export const routes = ({ queries, route }: Page, { scheduleAction }: Actions) => [
  get(
    "/schedules",
    route(
      "read",
      "html",
      (r) =>
        Effect.map(
          queries.timed(Effect.flatMap(Schedules.Schedules, (schedules) => schedules.list)),
          (list) => htmlResponse(ScheduleViews.schedulesPage(r.view, list))
        )
    )
  ),
  post("/schedules/actions/pause", route("write", "json", scheduleAction("pause"))),
  post("/schedules/actions/resume", route("write", "json", scheduleAction("resume")))
]
