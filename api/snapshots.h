/* api/snapshots.c: an agent's snapshots and restore (routes.c lists them). */
#ifndef FLEET_API_SNAPSHOTS_H
#define FLEET_API_SNAPSHOTS_H

struct api_call;

void api_snapshots_list(struct api_call *c);
void api_snapshot_create(struct api_call *c);
void api_snapshot_delete(struct api_call *c);
void api_snapshot_update(struct api_call *c);	/* pinned */
void api_snapshot_restore(struct api_call *c);

#endif
