/*
 * health_server: the health service, a resident root process in the guest
 * that runs fleetd's default health check with one program start. fleetd
 * reaches it through its SSH session as a forwarded TCP connection
 * (direct-tcpip) to HEALTH_SERVER_ADDR:HEALTH_SERVER_PORT, which dropbear
 * opens in its own process: no sshd child, no login shell, no agentd
 * start, no exec request. Each connection: the request line
 * "health USER\n"; a child the service forked ahead (waiting in accept,
 * so no fork is on the check's path; the next is forked when the check
 * ends) checks that root's login shell can
 * run (what every exec of fleetd's starts), drops to USER as run-as does
 * (become.h) and runs the check (health.h), whose output is the answer:
 * "healthy\n", or a line saying what is wrong; then it closes. The
 * children share one memo (health_memo.h): a check skips the shell's start
 * while a start that passed still holds.
 *
 * The port is below 1024, so no user but root can listen on it: while the
 * service runs nobody else can, and when it does not, the connection is
 * refused and fleetd runs `agentd health` over an exec as before. Any
 * local process may connect; the service checks users only (never root),
 * HEALTH_SERVER_MAX at a time, each within HEALTH_SERVER_MAX_S.
 */
#ifndef FLEET_AGENTD_HEALTH_SERVER_H
#define FLEET_AGENTD_HEALTH_SERVER_H

/* fleetd's side: vm/vm_internal.h, GUEST_HEALTH_PORT (the same number). */
#define HEALTH_SERVER_ADDR "127.0.0.1"
#define HEALTH_SERVER_PORT 877
#define HEALTH_SERVER_MAX 4		/* checks at a time; later connections wait in the backlog */
#define HEALTH_SERVER_MAX_S 50		/* one check's whole life, request included (fleetd gives up at 55) */

/*
 * Start the service in a child process of its own (named agentd-health)
 * and return in the caller. The relay does this at every boot. A service
 * already listening (one left by a relay that was restarted) is kept: the
 * new child finds the port taken and exits.
 */
void health_server_start(void);

/* Serve on 127.0.0.1:port until killed (`agentd health-server`). Returns 1 if it cannot listen. */
int health_server_run(int port);

#endif
