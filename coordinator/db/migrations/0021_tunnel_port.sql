-- The port at its advertised host where a node's data plane takes clients directly (gpunet.tunnel);
-- NULL: it takes them through the relay only.
ALTER TABLE node_reach ADD COLUMN tunnel_port integer;
