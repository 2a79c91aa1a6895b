/* api/images.c: the guest image store and an agent's upgrade (routes.c lists them). */
#ifndef FLEET_API_IMAGES_H
#define FLEET_API_IMAGES_H

struct api_call;

void api_images_list(struct api_call *c);
void api_image_delete(struct api_call *c);
void api_agent_upgrade(struct api_call *c);

#endif
