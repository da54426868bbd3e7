package sluicegate.spark.jvm;

import java.io.IOException;
import java.lang.reflect.Field;
import java.net.InetAddress;
import java.net.Socket;
import javax.net.SocketFactory;
import py4j.CallbackClient;
import py4j.GatewayServer;
import py4j.Py4JPythonClient;

/**
 * Py4J's calls from the JVM into the driver's Python (every planner call of the JVM read
 * path) without Nagle's algorithm. Py4J writes a command through an 8 KB buffer: a command
 * longer than that (an offset of a few hundred splits) goes out as a full segment and a short
 * tail, which Nagle holds until the first is acknowledged, and Linux delays that
 * acknowledgement by 40 ms. Measured here: a callback with a 10 KB argument took 44 ms, one
 * with 2 KB 0.2 ms. This sets TCP_NODELAY on the sockets of the session's callback client.
 */
public final class CallbackNoDelay {
    private CallbackNoDelay() {}

    /** Whether the gateway's callback client now opens its connections with TCP_NODELAY. */
    public static boolean apply(GatewayServer server) {
        Py4JPythonClient client = server.getCallbackClient();
        if (!(client instanceof CallbackClient callbacks)) {
            return false;
        }
        try {
            Field factory = CallbackClient.class.getDeclaredField("socketFactory");
            factory.setAccessible(true);
            SocketFactory current = (SocketFactory) factory.get(callbacks);
            if (!(current instanceof NoDelay)) {
                factory.set(callbacks, new NoDelay(current));
                // a copy with the same settings and the new factory, its pooled connections closed
                server.resetCallbackClient(callbacks.getAddress(), callbacks.getPort());
            }
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false; // another Py4J: its calls still work, only slower with large offsets
        }
    }

    private static final class NoDelay extends SocketFactory {
        private final SocketFactory base;

        NoDelay(SocketFactory base) {
            this.base = base;
        }

        private static Socket noDelay(Socket socket) throws IOException {
            socket.setTcpNoDelay(true);
            return socket;
        }

        @Override
        public Socket createSocket() throws IOException {
            return noDelay(base.createSocket());
        }

        @Override
        public Socket createSocket(String host, int port) throws IOException {
            return noDelay(base.createSocket(host, port));
        }

        @Override
        public Socket createSocket(String host, int port, InetAddress local, int localPort) throws IOException {
            return noDelay(base.createSocket(host, port, local, localPort));
        }

        @Override
        public Socket createSocket(InetAddress host, int port) throws IOException {
            return noDelay(base.createSocket(host, port));
        }

        @Override
        public Socket createSocket(InetAddress address, int port, InetAddress local, int localPort) throws IOException {
            return noDelay(base.createSocket(address, port, local, localPort));
        }
    }
}
