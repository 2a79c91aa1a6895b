/*
 * routes: the control API's route table, the one place that maps a method
 * and path to a handler, its audit action and its body cap. fleetd's main
 * hands it to api_start(), so the server never includes a handler and the
 * handlers include only the server: calls go one way.
 */
#ifndef FLEET_API_ROUTES_H
#define FLEET_API_ROUTES_H

#include <stddef.h>

#include "api/server.h"

extern const struct api_route api_routes[];
extern const size_t api_n_routes;

#endif
