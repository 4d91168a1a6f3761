# DKV as a FROM scratch image: nothing but the static dkv binary. No base
# image is pulled, so the build works without a registry. Build the
# binary first and use its directory as the context:
#
#   CGO_ENABLED=0 go build -o bin/dkv ./cmd/dkv
#   docker build -f Dockerfile -t dkv:dev bin/
#
# Ports: 7861 client gRPC, 7862 peers, 7863 HTTP. Data lives in /data.
FROM scratch
COPY dkv /dkv
EXPOSE 7861 7862 7863
VOLUME ["/data"]
ENTRYPOINT ["/dkv"]
CMD ["serve", "--client-addr", "0.0.0.0:7861", "--peer-addr", "0.0.0.0:7862", "--http-addr", "0.0.0.0:7863", "--data-dir", "/data"]
