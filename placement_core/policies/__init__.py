"""The torch-free half of the learned placers (Placeto, GDP): what a policy sees and how it is rewarded.

    features    a graph's static arrays (times, memory, reachability) and, per MDP step, the node
                features and each candidate device's context
    reinforce   returns, the time-step baseline and the normalised rewards of REINFORCE
    policyfile  the ``placement-policy/1`` file a trained policy is shipped in

The neural networks and their training live in ``placement_core.torch.policies``
(the only place torch is imported); the dashboard and the CLI read policy files
and family graphs without torch.
"""
