/*
 * procstatus: a signal set out of the text of /proc/PID/status. fleet-init
 * learns from "SigIgn" which signals it inherited as ignored (an ignored
 * signal survives execve, so the command would inherit it too) with one
 * read, where asking sigaction(2) about every signal takes 64 system calls.
 */
#ifndef FLEET_PROCSTATUS_H
#define FLEET_PROCSTATUS_H

#include <stddef.h>
#include <stdint.h>

/*
 * The mask of the line "FIELD:\t<hex>" of a /proc/PID/status text (len
 * bytes, not necessarily NUL-terminated) into *mask: bit n-1 is signal n.
 * 0, or -EINVAL when the field is absent, or its value is not 1 to 16 hex
 * digits ending the line (*mask is then untouched).
 */
int proc_status_sigmask(const char *text, size_t len, const char *field, uint64_t *mask);

#endif
