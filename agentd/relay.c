/*
 * relay: owns the guest end of fleetd's control channel. fleetd reaches the
 * guest's sshd not over the network but over a virtio-serial port (host end:
 * a Unix socket made by libvirt). This file finds that port by name, keeps it
 * open for the life of the process, and for every host connection opens one
 * TCP connection to the local sshd and copies bytes both ways.
 *
 * Kernel behaviour this relies on (drivers/char/virtio_console.c):
 *  - the port can be opened only once (a second open is EBUSY), so it stays
 *    open across host connections;
 *  - while no host is connected, poll() reports POLLIN | POLLHUP at once
 *    (the driver says a read would not block) and read() returns 0, so
 *    neither can be used to sleep until a host connects, and POLLIN alone
 *    does not mean the host sent anything: only a read that returns bytes
 *    does. The port sends SIGIO (with O_ASYNC) when the host connection
 *    state changes and when data arrives, so we block SIGIO and sleep in
 *    sigtimedwait() after a read returned 0;
 *  - POLLOUT is set only while a host is connected;
 *  - a host's data and the notice that it connected travel on different
 *    virtqueues, so the first bytes of a connection can be readable while
 *    the port still says POLLHUP, and the notice that the previous host left
 *    can arrive after the next host's first bytes. Readable data therefore
 *    always wins over POLLHUP, "no host" before the connection was seen
 *    connected is waited out (OPEN_GRACE_MS) rather than taken for a
 *    hang-up, and bytes are never thrown away: discarding
 *    "stale" bytes threw away the next client's banner and hung its
 *    handshake (seen as reconnects that failed for 20-90 s).
 * sshd is connected only after the host's first bytes arrive: an SSH server
 * talks first, and a banner written before anyone listens would be lost.
 * Those bytes are read before sshd is connected and kept until it is.
 * Taking POLLIN for the host's bytes, as this file once did, made the relay
 * connect to sshd, read 0, close and start over, dozens of times a second
 * for as long as no host was connected: dropbear forked a child for each,
 * the guest's one CPU went to that, and a host that connected again (after
 * a snapshot, a restore, a fleetd restart) waited seconds for sshd's banner,
 * or got none before its handshake timed out (docs/vm-backend.md).
 */
#include "agentd/relay.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SYSFS_PORTS "/sys/class/virtio-ports"
#define FIND_WAIT_MS 10000    /* the port may appear shortly after boot */
#define CONNECT_WAIT_MS 10000 /* sshd may be (re)starting */
#define HANGUP_WAIT_MS 10000  /* after sshd closed, wait this long for the host */
#define SIGIO_NAP_MS 2000     /* safety net: recheck the port even without SIGIO */
#define OPEN_GRACE_MS 5000    /* data came, but the host's "connected" notice lags */
#define BUF_SIZE 65536

/* NEW_HOST: the host's bytes in the buffer begin another SSH connection. */
enum session_end { HOST_CLOSED, TCP_CLOSED, NEW_HOST };

/* An SSH client's first bytes ("SSH-2.0-..."), which nothing later in a
 * connection starts with: past the banners, everything is binary packets. */
#define SSH_BANNER_PREFIX "SSH-2.0-"

struct buf {
    char data[BUF_SIZE];
    size_t off, len;
};

__attribute__((format(printf, 1, 2))) static void relay_log(const char *fmt, ...)
{
    va_list ap;
    int saved = errno;

    fputs("agentd relay: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    errno = saved;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* /dev/<vportNpM> whose sysfs "name" is name; no udev, so no symlinks. */
static int find_port(const char *name, char *dev, size_t devlen)
{
    DIR *d = opendir(SYSFS_PORTS);
    struct dirent *de;
    int r = -ENOENT;

    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        char path[PATH_MAX], got[256];
        ssize_t n;
        int fd;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), SYSFS_PORTS "/%s/name", de->d_name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        n = read(fd, got, sizeof(got) - 1);
        close(fd);
        if (n <= 0)
            continue;
        got[n] = '\0';
        got[strcspn(got, "\n")] = '\0';
        if (strcmp(got, name) == 0) {
            if ((size_t)snprintf(dev, devlen, "/dev/%s", de->d_name) >= devlen)
                r = -ENAMETOOLONG;
            else
                r = 0;
            break;
        }
    }
    closedir(d);
    return r;
}

static int open_port(const char *name)
{
    int64_t deadline = now_ms() + FIND_WAIT_MS;
    char dev[PATH_MAX];
    int r;

    for (;;) {
        r = find_port(name, dev, sizeof(dev));
        if (r == 0) {
            int fd = open(dev, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
            if (fd >= 0)
                return fd;
            r = -errno;
            if (r == -EBUSY) {
                relay_log("%s (%s) is already open elsewhere", dev, name);
                return r;
            }
        }
        if (now_ms() >= deadline) {
            relay_log("no usable virtio-serial port named %s: %s", name, strerror(-r));
            return r;
        }
        sleep_ms(100);
    }
}

/* Sleep up to ms for SIGIO (a change of the host's connection state). */
static void nap_for_sigio(const sigset_t *sigio, int ms)
{
    struct timespec nap = { ms / 1000, (long)(ms % 1000) * 1000000L };

    (void)sigtimedwait(sigio, NULL, &nap);
}

/* Sleep until a host connects and sends its first bytes, and read them into b.
 * Bytes already in b (kept from an attempt that found no sshd) count: they
 * are the host's, so return at once. */
/* Could b be the first bytes of an SSH connection? (A read shorter than the
 * prefix counts if it matches as far as it goes.) */
static int starts_like_banner(const struct buf *b)
{
    size_t have = b->len - b->off, n = have < strlen(SSH_BANNER_PREFIX) ? have : strlen(SSH_BANNER_PREFIX);

    return memcmp(b->data + b->off, SSH_BANNER_PREFIX, n) == 0;
}

static int wait_host_data(int fd, struct buf *b, const sigset_t *sigio)
{
    while (b->len == 0) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (p.revents & POLLNVAL)
            return -EBADF;
        if (p.revents & POLLERR)
            return -EIO; /* the port was unplugged */
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        /* POLLIN is also "no host" (see the top): only bytes tell. They may
         * come while the port still says POLLHUP (the "connected" notice lags). */
        n = read(fd, b->data, sizeof(b->data));
        if (n > 0) {
            b->off = 0;
            b->len = (size_t)n;
        } else if (n == 0) {
            /* No host: poll cannot sleep here, SIGIO tells us of a connect or of data. */
            nap_for_sigio(sigio, SIGIO_NAP_MS);
        } else if (errno != EAGAIN && errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* After sshd closed: wait (bounded) for the host to go away too, keeping any
 * bytes it sends meanwhile, which may already belong to its next connection. */
static void wait_host_hangup(int fd)
{
    int64_t deadline = now_ms() + HANGUP_WAIT_MS;

    for (;;) {
        /* events=0: only POLLHUP/POLLERR wake us, data does not. */
        struct pollfd p = { .fd = fd, .events = 0 };
        int64_t left = deadline - now_ms();
        int n;

        if (left <= 0) {
            relay_log("host kept the channel open after sshd closed");
            return;
        }
        n = poll(&p, 1, (int)left);
        if (n < 0 && errno != EINTR)
            return;
        if (n > 0)
            return;
    }
}

int relay_address(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (port <= 0 || port > 65535)
        return -EINVAL;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *len = sizeof(*in4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*in6);
        return 0;
    }
    return -EINVAL;
}

static int connect_tcp(const struct sockaddr_storage *ss, socklen_t len, const char *host, int port)
{
    int64_t deadline = now_ms() + CONNECT_WAIT_MS;
    int last;

    for (;;) {
        int one = 1;
        int s = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (s < 0) {
            last = -errno;
        } else if (connect(s, (const struct sockaddr *)ss, len) == 0) {
            setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
            return s;
        } else {
            last = -errno;
            close(s);
        }
        if (now_ms() >= deadline) {
            relay_log("cannot connect to %s:%d: %s", host, port, strerror(-last));
            return last;
        }
        sleep_ms(200);
    }
}

/* Write what we can from b to fd; -1 when fd is gone. */
static int flush_some(int fd, struct buf *b)
{
    ssize_t n = write(fd, b->data + b->off, b->len - b->off);

    if (n < 0)
        return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    b->off += (size_t)n;
    if (b->off == b->len)
        b->off = b->len = 0;
    return 0;
}

/* Copy bytes both ways until one side closes, starting with the host's bytes
 * already in to_tcp. Buffered, so a slow reader on one side never blocks the
 * other direction.
 * A read that begins with an SSH banner after the session's first bytes is
 * a new host connection whose bytes overtook the notices that the last host
 * left and this one came (a checkpoint restored with a session open, a
 * quick reconnect): it ends the session with NEW_HOST, its bytes kept in
 * to_tcp for a new sshd connection, instead of going to the old one. A read
 * never returns bytes of two host connections (the driver hands out one of
 * its buffers per read, and QEMU fills a buffer from one read of its
 * socket), so a banner starts a read. */
static enum session_end relay_session(int port_fd, int tcp, struct buf *to_tcp, const sigset_t *sigio)
{
    static struct buf to_port;
    int tcp_eof = 0, tcp_dead = 0, seen_connected = 0;
    int64_t hup_since = 0;
    size_t host_bytes = to_tcp->len;

    to_port.off = to_port.len = 0;
    for (;;) {
        struct pollfd p[2];
        int want_tcp_read = !tcp_eof && to_port.len == 0;
        int no_host = 0;

        if (tcp_eof && to_port.len == 0)
            return TCP_CLOSED;
        if (tcp_dead)
            to_tcp->off = to_tcp->len = 0; /* nobody left to read it */

        p[0].fd = port_fd;
        p[0].events = (to_tcp->len == 0 ? POLLIN : 0) | (to_port.len ? POLLOUT : 0);
        /* A dead socket reports POLLHUP forever: poll it only to read its tail. */
        p[1].fd = (tcp_dead && !want_tcp_read) ? -1 : tcp;
        p[1].events = (want_tcp_read ? POLLIN : 0) | (to_tcp->len ? POLLOUT : 0);
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            relay_log("poll: %s", strerror(errno));
            return HOST_CLOSED;
        }

        if (!(p[0].revents & POLLHUP)) {
            seen_connected = 1;
            hup_since = 0;
        }
        if ((p[1].revents & POLLOUT) && flush_some(tcp, to_tcp) < 0)
            tcp_dead = 1;
        if ((p[0].revents & POLLOUT) && flush_some(port_fd, &to_port) < 0)
            return HOST_CLOSED;

        if (p[0].revents & POLLIN) {
            /* Data wins over POLLHUP; a read of 0 is the driver's "no host". */
            ssize_t n = read(port_fd, to_tcp->data, sizeof(to_tcp->data));
            if (n > 0) {
                to_tcp->off = 0;
                to_tcp->len = (size_t)n;
                if (host_bytes > 0 && (size_t)n >= strlen(SSH_BANNER_PREFIX) &&
                    memcmp(to_tcp->data, SSH_BANNER_PREFIX, strlen(SSH_BANNER_PREFIX)) == 0)
                    return NEW_HOST;
                host_bytes += (size_t)n;
            } else if (n == 0) {
                no_host = 1;
            } else if (errno != EAGAIN && errno != EINTR) {
                return HOST_CLOSED;
            }
        } else if (p[0].revents & POLLERR) {
            return HOST_CLOSED;
        } else if (p[0].revents & POLLHUP) {
            no_host = 1;
        }
        if (no_host) {
            /* Before the host's "connected" notice, "no host" is the lag, not a hang-up. */
            int64_t now = now_ms();
            if (seen_connected)
                return HOST_CLOSED;
            if (!hup_since)
                hup_since = now;
            if (now - hup_since > OPEN_GRACE_MS)
                return HOST_CLOSED;
            if (!(p[1].revents & (POLLIN | POLLOUT)))
                nap_for_sigio(sigio, 20); /* without a host, poll returns at once */
        }

        if (p[1].revents & POLLIN) {
            ssize_t n = read(tcp, to_port.data, sizeof(to_port.data));
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                tcp_eof = 1;
            else if (n > 0)
                to_port.len = (size_t)n;
        } else if (p[1].revents & (POLLHUP | POLLERR)) {
            tcp_dead = 1;
        }
    }
}

int relay_run(const char *port_name, const char *host, int port)
{
    sigset_t sigio, old;
    int fd, r;
    struct sockaddr_storage to;
    socklen_t to_len;

    if (!port_name || !*port_name || !host || relay_address(host, port, &to, &to_len) < 0)
        return -EINVAL;

    fd = open_port(port_name);
    if (fd < 0)
        return fd;

    /* SIGIO's default action kills us: block it and collect it synchronously. */
    sigemptyset(&sigio);
    sigaddset(&sigio, SIGIO);
    sigprocmask(SIG_BLOCK, &sigio, &old);
    if (fcntl(fd, F_SETOWN, getpid()) < 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC | O_NONBLOCK) < 0) {
        r = -errno;
        relay_log("cannot enable SIGIO on the port: %s", strerror(-r));
        goto out;
    }

    for (;;) {
        /* The host's bytes not yet given to sshd. */
        static struct buf from_host;
        enum session_end end;
        int tcp;

        r = wait_host_data(fd, &from_host, &sigio);
        if (r < 0) {
            relay_log("waiting for the host: %s", strerror(-r));
            break;
        }
        if (!starts_like_banner(&from_host)) {
            /* The tail of a host connection whose sshd already closed (its
             * client's last packets came after): given to a new sshd, they
             * would end it before the next client's banner, which then
             * lands inside a dead session. */
            relay_log("dropping %zu bytes that do not begin an SSH connection", from_host.len - from_host.off);
            from_host.off = from_host.len = 0;
            continue;
        }
        tcp = connect_tcp(&to, to_len, host, port);
        if (tcp < 0) {
            /* Nothing to relay to; let the host see silence, then hang up.
             * Its bytes are kept for the next try. */
            wait_host_hangup(fd);
            continue;
        }
        end = relay_session(fd, tcp, &from_host, &sigio);
        if (end == TCP_CLOSED)
            wait_host_hangup(fd);
        close(tcp);
        if (end == NEW_HOST) {
            relay_log("a new host connection began inside the last one; starting over with sshd");
            continue; /* from_host holds its first bytes */
        }
        /* What is left belonged to the sshd connection that just ended. */
        from_host.off = from_host.len = 0;
    }

out:
    close(fd);
    {
        /* Drop a SIGIO still pending before unblocking it. */
        struct timespec zero = { 0, 0 };
        while (sigtimedwait(&sigio, NULL, &zero) > 0)
            ;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return r;
}
