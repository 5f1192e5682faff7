/*
 * drums-tcp-owner: who owns the client end of a loopback TCP connection, for
 * the uid check of the OSWorld listeners (src/host/tcp-owner.ts,
 * docs/osworld.md "Who can connect"). Node has no netlink, and the text
 * table /proc/net/tcp is the wrong tool: it is read whole (every socket of
 * the network namespace, milliseconds on a busy host), may skip entries
 * that move while it is read, and lists TIME_WAIT entries with uid 0.
 *
 * This asks the kernel for one socket by its exact 4-tuple (sock_diag,
 * SOCK_DIAG_BY_FAMILY without NLM_F_DUMP: an exact hash lookup, not a walk)
 * and prints its state and owner uid. The caller decides; it must accept only
 * state 1 (ESTABLISHED): a TIME_WAIT entry has no owner and reads as uid 0.
 *
 * Long-lived, one line per question, answers in order, so a check costs a
 * pipe round trip (tens of microseconds) instead of a process start:
 *
 *   in:   SRC SPORT DST DPORT          (the client's end first; IPv4 or IPv6 text)
 *   out:  STATE UID                    (the kernel's tcp state number and owner uid)
 *         none                         (no such socket)
 *         error ERRNO                  (the lookup failed)
 *
 * Exits 0 at end of input; a malformed line is a reason on stderr and exit 2.
 * Built by scripts/setup.sh.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* One address in the byte layout of inet_diag_sockid (IPv4 in the first word). */
static int parse_addr(const char *s, int *family, __be32 out[4]) {
  memset(out, 0, 16);
  if (inet_pton(AF_INET, s, out) == 1) {
    *family = AF_INET;
    return 0;
  }
  if (inet_pton(AF_INET6, s, out) == 1) {
    *family = AF_INET6;
    return 0;
  }
  return -1;
}

static int parse_port(const char *s, unsigned *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || !*s || *end || v == 0 || v > 65535) return -1;
  *out = (unsigned)v;
  return 0;
}

/* Asks for one socket; prints the answer line. Returns -1 only if the netlink socket itself failed. */
static int lookup(int nl, unsigned seq, int family, const __be32 src[4], unsigned sport, const __be32 dst[4], unsigned dport) {
  struct {
    struct nlmsghdr nh;
    struct inet_diag_req_v2 r;
  } q;
  memset(&q, 0, sizeof q);
  q.nh.nlmsg_len = sizeof q;
  q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  q.nh.nlmsg_flags = NLM_F_REQUEST;
  q.nh.nlmsg_seq = seq;
  q.r.sdiag_family = (unsigned char)family;
  q.r.sdiag_protocol = IPPROTO_TCP;
  q.r.idiag_states = ~0U;
  q.r.id.idiag_sport = htons((unsigned short)sport);
  q.r.id.idiag_dport = htons((unsigned short)dport);
  memcpy(q.r.id.idiag_src, src, 16);
  memcpy(q.r.id.idiag_dst, dst, 16);
  q.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  q.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(nl, &q, sizeof q, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) return -1;
  /* Read until the answer to this question (an earlier timed-out one cannot be pending: questions are serial). */
  for (;;) {
    union {
      struct nlmsghdr nh;
      char bytes[8192];
    } buf;
    ssize_t n = recv(nl, &buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    for (struct nlmsghdr *h = &buf.nh; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        int err = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
        if (err == ENOENT) printf("none\n");
        else printf("error %d\n", err);
        return 0;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
        printf("error %d\n", EPROTO);
        return 0;
      }
      struct inet_diag_msg *m = NLMSG_DATA(h);
      /* The kernel's answer must name the very connection asked about (a listener can match a lookup too: its state says so). */
      if (m->id.idiag_sport != q.r.id.idiag_sport || m->id.idiag_dport != q.r.id.idiag_dport || memcmp(m->id.idiag_src, src, 16) ||
          memcmp(m->id.idiag_dst, dst, 16)) {
        printf("none\n");
        return 0;
      }
      printf("%u %u\n", m->idiag_state, m->idiag_uid);
      return 0;
    }
  }
}

int main(void) {
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) {
    fprintf(stderr, "drums-tcp-owner: netlink sock_diag: %s\n", strerror(errno));
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  char line[256];
  unsigned seq = 0;
  while (fgets(line, sizeof line, stdin)) {
    char a[64], b[64];
    char pa[8], pb[8];
    __be32 src[4], dst[4];
    int fa, fb;
    unsigned sport, dport;
    if (sscanf(line, "%63s %7s %63s %7s", a, pa, b, pb) != 4 || parse_addr(a, &fa, src) || parse_addr(b, &fb, dst) || fa != fb ||
        parse_port(pa, &sport) || parse_port(pb, &dport)) {
      fprintf(stderr, "drums-tcp-owner: bad question '%.80s'\n", line);
      return 2;
    }
    if (lookup(nl, ++seq, fa, src, sport, dst, dport) < 0) {
      fprintf(stderr, "drums-tcp-owner: netlink: %s\n", strerror(errno));
      return 1;
    }
  }
  return 0;
}
