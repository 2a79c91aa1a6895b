/*
 * commands: fleetctl's command handlers, one file per resource; fleetctl.c
 * puts each into its table row. A handler gets argv from the command name
 * on and returns the exit status (call.h).
 */
#ifndef FLEET_CTL_COMMANDS_H
#define FLEET_CTL_COMMANDS_H

#include "ctl/call.h"

#define CMD_HANDLER(name) int name(struct ctl *ctl, const struct command *cmd, int argc, char **argv)

/* cmd_system.c */
CMD_HANDLER(cmd_status);
CMD_HANDLER(cmd_audit);
/* cmd_backup.c */
CMD_HANDLER(cmd_backup);
/* cmd_watch.c */
CMD_HANDLER(cmd_watch);
/* cmd_doctor.c */
CMD_HANDLER(cmd_doctor);
/* cmd_agents.c: start, stop and restart share cmd_lifecycle */
CMD_HANDLER(cmd_create);
CMD_HANDLER(cmd_list);
CMD_HANDLER(cmd_show);
CMD_HANDLER(cmd_rm);
CMD_HANDLER(cmd_lifecycle);
CMD_HANDLER(cmd_set);
CMD_HANDLER(cmd_health);
/* cmd_exec.c */
CMD_HANDLER(cmd_exec);
CMD_HANDLER(cmd_console);
/* cmd_snapshots.c */
CMD_HANDLER(cmd_snapshot);
CMD_HANDLER(cmd_snapshots);
CMD_HANDLER(cmd_restore);
/* cmd_memory.c */
CMD_HANDLER(cmd_memory);
/* cmd_runs.c */
CMD_HANDLER(cmd_trigger);
CMD_HANDLER(cmd_runs);
/* cmd_hooks.c */
CMD_HANDLER(cmd_hook);
CMD_HANDLER(cmd_events);
/* cmd_schedules.c */
CMD_HANDLER(cmd_schedule);
CMD_HANDLER(cmd_cancel);
CMD_HANDLER(cmd_logs);
/* cmd_secrets.c */
CMD_HANDLER(cmd_secret);
/* cmd_images.c */
CMD_HANDLER(cmd_image);
CMD_HANDLER(cmd_upgrade);
/* cmd_hosts.c */
CMD_HANDLER(cmd_host);
CMD_HANDLER(cmd_move);
/* cmd_apply.c */
CMD_HANDLER(cmd_apply);
CMD_HANDLER(cmd_export);

#endif
