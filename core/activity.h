/*
 * activity: what fleet has done in an agent's environment, as a counter per
 * agent that only grows. Every exec fleet starts there (a person's exec or
 * put, a run, the memory store's own), every state change (start, stop,
 * crash, restore) adds one; health checks do not. A health check that
 * passed when the counter read N describes the environment for as long as
 * it still reads N (apart from what the agent's own processes do meanwhile):
 * snapshots.c takes such a recent check as the check of its snapshot.
 */
#ifndef FLEET_ACTIVITY_H
#define FLEET_ACTIVITY_H

#include <stdint.h>

struct fleetd;

/* Count one thing done in agent's environment (never fails: the counter lives in fleetd's memory). */
void activity_note(struct fleetd *f, const char *agent);

/*
 * An exec of fleet's in agent's environment begins and ends: each counts as
 * one (activity_note()), and activity_running() says how many are running.
 * Every activity_begin() has one activity_end().
 */
void activity_begin(struct fleetd *f, const char *agent);
void activity_end(struct fleetd *f, const char *agent);

/*
 * agent's counter now (0 until the first activity_note(); its values come
 * from one clock for all agents, so they only grow, also across a remove
 * and create of one name), and its execs running now.
 */
uint64_t activity_seq(struct fleetd *f, const char *agent);
unsigned activity_running(struct fleetd *f, const char *agent);

/* agent was removed: its entry goes (kept while an exec of it still runs). */
void activity_forget(struct fleetd *f, const char *agent);
/* At exit. */
void activity_free(struct fleetd *f);

#endif
