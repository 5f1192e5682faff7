"""What is built on the client: gymnasium environments (``gym``, ``gym_group``, ``cluster_env``),
the cluster client and its placement (``cluster``, ``placement``), host discovery from Kubernetes
and Ray (``k8s``, ``ray``) and AgentRL's environment driver (``agentrl``).

Nothing is imported here: each module needs its own optional extra (gymnasium, ray, ...). The
older names ``drums.gym``, ``drums.cluster``, ... are the same modules (see drums/gym.py).
"""
