/* api/secrets.c: an agent's secrets (routes.c lists them): set, list (never values), remove. */
#ifndef FLEET_API_SECRETS_H
#define FLEET_API_SECRETS_H

struct api_call;

void api_secrets_list(struct api_call *c);
void api_secret_set(struct api_call *c);
void api_secret_remove(struct api_call *c);
void api_secret_compare(struct api_call *c);

#endif
