/* api/hosts.c: the hypervisor hosts VM agents are placed on (#15; routes.c lists them). */
#ifndef FLEET_API_HOSTS_H
#define FLEET_API_HOSTS_H

struct api_call;

void api_hosts_list(struct api_call *c);
void api_host_add(struct api_call *c);
void api_host_update(struct api_call *c);
void api_host_delete(struct api_call *c);

#endif
