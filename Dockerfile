# DKV as a FROM scratch image: nothing but the static dkv binary. No base
# image is pulled, so the build works without a registry. Build the
# binary first and use its directory as the context:
#
#   make image        # = make build (CGO_ENABLED=0) + the docker build below
#   docker build -f Dockerfile -t dkv:dev bin/
#
# The binary must be static: a scratch image has no libc or dynamic
# loader, and a cgo-linked dkv fails there with "exec /dkv: no such file
# or directory". `make build` sets CGO_ENABLED=0; a plain `go build` on a
# machine with a C compiler does not.
#
# Ports: 7861 client gRPC, 7862 peers, 7863 HTTP. Data lives in /data.
#
# The default command is one member used from the host that runs it,
# published as README shows (docker run -p 127.0.0.1:7861:7861 -p
# 127.0.0.1:7863:7863 ...). The client and HTTP ports listen on every
# interface of the container, so that Docker can forward to them, and
# the member advertises 127.0.0.1:7861, the address a client on that host
# dials: one that discovers members finds the endpoint it already has.
# A lone member has no peer to talk to, so its peer port listens on the
# container's loopback only, where it needs no advertised address and
# nothing outside the container can reach it. Members of a cluster are
# started with commands of their own, as deploy/docker-compose.yml does.
FROM scratch
COPY dkv /dkv
EXPOSE 7861 7862 7863
VOLUME ["/data"]
ENTRYPOINT ["/dkv"]
CMD ["serve", "--client-addr", "0.0.0.0:7861", "--advertise-client-addr", "127.0.0.1:7861", "--peer-addr", "127.0.0.1:7862", "--http-addr", "0.0.0.0:7863", "--data-dir", "/data"]
