/* api/system.c: status and the audit log (routes.c lists them). */
#ifndef FLEET_API_SYSTEM_H
#define FLEET_API_SYSTEM_H

struct api_call;

void api_status_get(struct api_call *c);
void api_audit_get(struct api_call *c);

#endif
