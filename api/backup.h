/* api/backup.c: POST /v1/backup (routes.c lists it). */
#ifndef FLEET_API_BACKUP_H
#define FLEET_API_BACKUP_H

struct api_call;

void api_backup_create(struct api_call *c);

#endif
